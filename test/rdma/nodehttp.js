// nodehttp.js - Node's http server and client (libuv: epoll, non-blocking
// connect, writev) for applications.bats.
//   node nodehttp.js srv HOST PORT N: answer N POSTs with the same 2 MB
//     body; exit once all N are answered and every connection closed.
//   node nodehttp.js cli HOST PORT N: N POSTs of 10 kB over at most 4
//     keep-alive connections; prints "intact K of N" (the body's SHA-256
//     compared) and exits.
// The server does not call server.close(): since Node 19 it destroys the
// keep-alive connections it deems idle, which drops a response still
// queued in Node (over kernel TCP too, once the response outgrows the
// socket's buffer; doc/design.md, "Observability").
'use strict';
const http = require('http');
const crypto = require('crypto');
const [, , role, host, port, nArg] = process.argv;
const n = +nArg;
const body = Buffer.alloc(2 * 1024 * 1024);
for (let i = 0; i < body.length; i++) body[i] = (i * 7 + (i >> 10)) & 255;
const sum = crypto.createHash('sha256').update(body).digest('hex');

if (role === 'srv') {
  let served = 0, open = 0;
  const done = () => { if (served >= n && open === 0) process.exit(0); };
  const s = http.createServer((req, res) => {
    let got = 0;
    req.on('data', d => { got += d.length; });
    req.on('end', () => {
      if (got !== 10000) console.log(`request of ${got} bytes`);
      res.end(body, () => { served++; done(); });
    });
  });
  s.on('connection', c => {
    open++;
    c.on('error', e => console.log(`server socket: ${e}`));
    c.on('close', () => { open--; done(); });
  });
  s.listen(+port, host);
} else {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  let ok = 0, finished = 0;
  const end = () => {
    if (++finished < n) return;
    console.log(`intact ${ok} of ${n}`);
    agent.destroy();
  };
  for (let i = 0; i < n; i++) {
    const req = http.request({ host, port: +port, method: 'POST', path: '/', agent }, res => {
      const h = crypto.createHash('sha256');
      res.on('data', d => h.update(d));
      res.on('aborted', () => console.log(`response ${i}: aborted`));
      res.on('end', () => {
        if (h.digest('hex') === sum) ok++;
        else console.log(`response ${i}: body differs`);
        end();
      });
    });
    req.on('error', e => { console.log(`request ${i}: ${e}`); end(); });
    req.end(Buffer.alloc(10000, 'x'));
  }
}
