/**
 * warren's Model Context Protocol server, on the official SDK: `createMcpServer` builds it for
 * a connection to the daemon, `serveStdio` runs it for `warren mcp`, and `handleMcpRequest`
 * answers one streamable-HTTP request for the daemon's `/mcp`.
 */
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import type { ConnectionOptions } from '@warren/sdk';
import { createMcpServer } from './server.js';

export { createMcpServer, MCP_BASH_SESSION } from './server.js';

/** The largest JSON-RPC message `/mcp` reads: a 16 MiB file written as base64, with room to spare. */
const MAX_HTTP_MESSAGE_BYTES = 32 * 1024 * 1024;

/** Serves MCP on this process's stdin and stdout; resolves when the client closes the connection. */
export async function serveStdio(connection: ConnectionOptions = {}): Promise<void> {
  const server = createMcpServer(connection);
  const closed = new Promise<void>((resolve) => {
    server.server.onclose = resolve;
  });
  const transport = new StdioServerTransport();
  await server.connect(transport);
  process.stdin.once('end', () => void server.close());
  await closed;
}

/**
 * Answers one streamable-HTTP request in stateless mode: a fresh server and transport per
 * POST, whose tools call the daemon with `connection` (the caller's key). Responses are
 * event streams, whose keep-alive comments hold a long `bash` call's connection open. There
 * are no sessions to open a stream for (GET) or to end (DELETE): both are answered 405, as
 * the transport's specification asks of a server without them.
 */
export async function handleMcpRequest(request: Request, connection: ConnectionOptions): Promise<Response> {
  if (request.method !== 'POST') {
    return Response.json(
      {
        jsonrpc: '2.0',
        error: { code: -32000, message: `${request.method} is not allowed: this server is stateless; send each JSON-RPC message in a POST` },
        id: null,
      },
      { status: 405, headers: { allow: 'POST' } },
    );
  }
  const server = createMcpServer(connection);
  const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, maxRequestBodySize: MAX_HTTP_MESSAGE_BYTES });
  await server.connect(transport);
  return transport.handleRequest(request);
}
