// A small HTTP server for the node-dev template: its state (a hit counter) lives in memory,
// so a sandbox restored from a baked template shows the counter where the bake left it.
const http = require('node:http');

const port = Number(process.env.PORT || 3000);
const startedAt = new Date().toISOString();
let hits = 0;

http
  .createServer((req, res) => {
    if (req.url === '/' && req.method === 'GET') {
      hits++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify({ hits, pid: process.pid, startedAt })}\n`);
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(`${JSON.stringify({ error: 'not found' })}\n`);
  })
  .listen(port, '127.0.0.1', () => console.log(`listening on ${port}`));
