/**
 * `/mcp`: warren's MCP server over streamable HTTP (stateless). Its tools call this daemon's
 * API on loopback with the caller's own key, so a tool can do exactly what the key can.
 */
import { Hono } from 'hono';
import { handleMcpRequest } from '@warren/mcp';
import { requestApiKey, type AuthVars } from '../auth.js';

/** `self` is this daemon's API on loopback (and its certificate under TLS), known once it listens. */
export function mcpRoutes(self: () => { url: string; ca?: string }): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.all('/', (c) => handleMcpRequest(c.req.raw, { ...self(), apiKey: requestApiKey(c) }));
  return app;
}
