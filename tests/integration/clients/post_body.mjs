// post_body.mjs - Node's http module sends one request body over and over,
// the way an ordinary client does: write the whole body, then read the
// answer. For test_payload_too_large.py.
//
//   node post_body.mjs PORT METHOD PATH BODY_FILE ATTEMPTS
//
// One fresh connection per attempt (agent: false), one after another; one
// JSON line per attempt on stdout: {"attempt", "status", "content_type", "www_authenticate",
// "body"} or {"attempt", "error"} when no answer was read.
import fs from 'node:fs';
import http from 'node:http';

const [port, method, path, file, attempts] = process.argv.slice(2);
const body = fs.readFileSync(file);

function attempt() {
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: Number(port),
        method,
        path,
        agent: false,
        headers: { 'Content-Type': 'application/json', 'Content-Length': body.length },
      },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode,
            content_type: res.headers['content-type'] ?? null,
            www_authenticate: res.headers['www-authenticate'] ?? null,
            body: Buffer.concat(chunks).toString('utf8'),
          }),
        );
        res.on('error', (e) => resolve({ error: `response: ${e.code ?? e.message}` }));
      },
    );
    req.setTimeout(30000, () => req.destroy(new Error('no answer within 30 s')));
    req.on('error', (e) => resolve({ error: e.code ?? e.message }));
    req.end(body);
  });
}

for (let i = 0; i < Number(attempts); i++) {
  const outcome = await attempt();
  process.stdout.write(JSON.stringify({ attempt: i, ...outcome }) + '\n');
}
