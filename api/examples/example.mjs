// Schedule a job, read its status, cancel it: rmq-scheduler from Node.js
// (18 or later: the built-in fetch, no packages).
//
// The HTTP calls themselves, for reading or porting to a language without
// a library. From a Node application, use clients/node instead: batching,
// safe retries and typed errors over these same calls.
//
//   node api/examples/example.mjs [BASE_URL]     default http://127.0.0.1:8080
//   RMQS_API_TOKEN=... node api/examples/example.mjs
//
// Prints one line per step and exits non-zero on any unexpected answer:
//   scheduled id=<id> status=pending deliver_at=<time>
//   read id=<id> status=pending
//   cancelled id=<id> status=cancelled

const base = (process.argv[2] ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
const token = process.env.RMQS_API_TOKEN;

// One request; resolves to the parsed answer if its status is `want`.
async function call(want, method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(base + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  if (res.status !== want) {
    throw new Error(`${method} ${path}: HTTP ${res.status}: ${text}`);
  }
  return JSON.parse(text);
}

function check(ok, what, answer) {
  if (!ok) throw new Error(`${what}: unexpected answer ${JSON.stringify(answer)}`);
}

async function main() {
  // 1. Cancel order 1234 in 10 minutes unless it is paid by then.
  const job = await call(201, 'POST', '/schedule', {
    exchange: '',
    routing_key: 'orders.expire',
    body: { order: 1234 },
    delay_ms: 600_000,
    headers: { tenant: 'acme' },
  });
  check(job.status === 'pending', 'POST /schedule', job);
  console.log(`scheduled id=${job.id} status=${job.status} deliver_at=${job.deliver_at}`);

  // 2. Read it back.
  const again = await call(200, 'GET', `/jobs/${job.id}`);
  check(again.id === job.id, `GET /jobs/${job.id}`, again);
  console.log(`read id=${again.id} status=${again.status}`);

  // 3. The order was paid: cancel the job.
  const done = await call(200, 'DELETE', `/jobs/${job.id}`);
  check(done.status === 'cancelled', `DELETE /jobs/${job.id}`, done);
  console.log(`cancelled id=${done.id} status=${done.status}`);
}

main().catch((err) => {
  console.error(`example.mjs: ${err.message}${err.cause ? ` (${err.cause.message ?? err.cause})` : ''}`);
  process.exit(1);
});
