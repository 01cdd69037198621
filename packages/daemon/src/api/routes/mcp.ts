/**
 * `/mcp`: warren's MCP server over streamable HTTP (stateless). Its tools call this daemon's
 * API on loopback with the caller's own key, so a tool can do exactly what the key can.
 */
import { Hono } from 'hono';
import { handleMcpRequest } from '@warren/mcp';
import { requestApiKey, type AuthVars } from '../auth.js';

/** `selfUrl` is this daemon's API on loopback, known once it listens. */
export function mcpRoutes(selfUrl: () => string): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.all('/', (c) => handleMcpRequest(c.req.raw, { url: selfUrl(), apiKey: requestApiKey(c) }));
  return app;
}
