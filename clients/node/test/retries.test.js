// Retries against the real service: a client started before the service,
// a service restarted mid-way, 503 and 429 (Retry-After) from a front that
// stands between them, no retry of other 4xx; and the per-item
// idempotency keys of POST /schedule/batch, which await the server change.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Client, ConnectionError, InvalidArgumentError, ConflictError, UnavailableError } from '../index.js';
import { Service, sleep, freePort } from '../testlib/service.js';

const job = (extra = {}) => ({ exchange: 'orders', routing_key: 'retry', body: 'r', delay_ms: 3600000, ...extra });
const patient = { attempts: 40, baseMs: 20, capMs: 300 };

// An HTTP front for the service: `plan(req, n)` for request n answers
// {status, headers, body} itself, 'reset' to cut the connection after the
// service answered, or null to pass the request through.
async function front(target, plan) {
  const f = { n: 0, seen: [] };
  f.server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const n = f.n++;
      f.seen.push(req.method + ' ' + req.url);
      const p = plan(req, n);
      if (p && p !== 'reset') {
        res.writeHead(p.status, { 'Content-Type': 'application/json', ...(p.headers || {}) });
        return res.end(JSON.stringify(p.body));
      }
      const up = http.request(
        target + req.url,
        { method: req.method, headers: { ...req.headers, host: new URL(target).host } },
        (ur) => {
          const out = [];
          ur.on('data', (c) => out.push(c));
          ur.on('end', () => {
            if (p === 'reset') return req.socket.destroy();
            res.writeHead(ur.statusCode, ur.headers);
            res.end(Buffer.concat(out));
          });
        },
      );
      up.end(Buffer.concat(chunks));
    });
  });
  await new Promise((r) => f.server.listen(0, '127.0.0.1', r));
  f.url = `http://127.0.0.1:${f.server.address().port}`;
  f.close = () => {
    f.server.closeAllConnections();
    return new Promise((r) => f.server.close(r));
  };
  return f;
}

let svc;
before(async () => {
  svc = await new Service().start();
});
after(async () => {
  await svc.destroy();
});

test('a client started before the service: connection refused is retried, every job stored once', async () => {
  const late = new Service();
  late.port = await freePort();
  const c = new Client({ url: late.url, retry: patient, maxBatch: 100 });
  try {
    const calls = Array.from({ length: 1000 }, (_, i) => c.schedule(job({ routing_key: 'late', body: { i } })));
    const st = c.status();
    await sleep(400);
    await late.start();
    const jobs = await Promise.all(calls);
    assert.equal(new Set(jobs.map((j) => j.id)).size, 1000);
    assert.equal((await st).database.state, 'up');
    assert.deepEqual(await c.count({ routing_key: 'late' }), { count: 1000, capped: false });
  } finally {
    await c.close();
    await late.destroy();
  }
});

test('the service stopped and restarted mid-way: 0 lost', async () => {
  const s = await new Service().start();
  const c = new Client({ url: s.url, retry: patient, maxBatch: 50 });
  try {
    const calls = [];
    for (let wave = 0; wave < 20; wave++) {
      for (let i = 0; i < 100; i++) calls.push(c.schedule(job({ routing_key: 'restart', body: { wave, i } })));
      await sleep(20);
      if (wave === 6) await s.stop();
      if (wave === 12) await s.start({ wait: false });
    }
    const r = await Promise.allSettled(calls);
    const failed = r.filter((x) => x.status === 'rejected');
    assert.deepEqual(
      failed.map((x) => String(x.reason)),
      [],
    );
    const ids = new Set(r.map((x) => x.value.id));
    assert.equal(ids.size, 2000);
    assert.ok(c.retries > 0, 'the stop was seen');
    console.log(`# restart: ${c.retries} tries repeated`);
    // Every job a caller got is in the store after the restart.
    const stored = new Set();
    for await (const j of c.list({ routing_key: 'restart' }, { pageSize: 1000 })) stored.add(j.id);
    for (const id of ids) assert.ok(stored.has(id), `job ${id} lost`);
    // Without item keys a batch cut by the stop after its commit could be
    // stored twice when retried; with SIGTERM's drain none was here.
    assert.equal(stored.size, 2000);
  } finally {
    await c.close();
    await s.destroy();
  }
});

test('429 with Retry-After and 503 are retried (the Retry-After honoured); the job is stored once', async () => {
  const f = await front(svc.url, (req, n) => {
    if (n === 0)
      return {
        status: 429,
        headers: { 'Retry-After': '1' },
        body: { error: { code: 'unavailable', message: 'slow down' } },
      };
    if (n === 1 || n === 2)
      return { status: 503, body: { error: { code: 'unavailable', message: 'the database is unavailable' } } };
    return null;
  });
  const c = new Client({ url: f.url, retry: { attempts: 5, baseMs: 10, capMs: 50 } });
  try {
    const t0 = Date.now();
    const m = await c.schedule(job({ routing_key: 'r429' }));
    assert.ok(Date.now() - t0 >= 1000, 'Retry-After: 1 waited');
    assert.equal(f.n, 4);
    assert.equal((await c.get(m.id)).routing_key, 'r429');
    assert.deepEqual(await c.count({ routing_key: 'r429' }), { count: 1, capped: false });
  } finally {
    await c.close();
    await f.close();
  }
});

test('retries end after retry.attempts with the last error; other 4xx are never retried', async () => {
  const f = await front(svc.url, (req) => {
    if (req.url.startsWith('/status'))
      return { status: 503, body: { error: { code: 'unavailable', message: 'down' } } };
    if (req.url.startsWith('/stats'))
      return { status: 400, body: { error: { code: 'invalid_argument', message: 'no' } } };
    return { status: 409, body: { error: { code: 'conflict', message: 'no' } } };
  });
  const c = new Client({ url: f.url, retry: { attempts: 3, baseMs: 1, capMs: 5 } });
  try {
    await assert.rejects(c.status(), (e) => e instanceof UnavailableError && e.status === 503);
    assert.equal(f.n, 3);
    await assert.rejects(c.stats(), InvalidArgumentError);
    assert.equal(f.n, 4);
    await assert.rejects(c.scheduleOne(job()), ConflictError);
    assert.equal(f.n, 5);
  } finally {
    await c.close();
    await f.close();
  }
  const port = await freePort();
  const nobody = new Client({ url: `http://127.0.0.1:${port}`, retry: { attempts: 2, baseMs: 1, capMs: 2 } });
  await assert.rejects(nobody.get('x'), (e) => e instanceof ConnectionError && e.cause.code === 'ECONNREFUSED');
  await nobody.close();
});

test('scheduleOne() after a connection cut once answered: retried with the same Idempotency-Key, one job', async () => {
  const f = await front(svc.url, (req, n) => (n === 0 ? 'reset' : null));
  const c = new Client({ url: f.url, retry: { attempts: 3, baseMs: 1, capMs: 5 } });
  try {
    const j = await c.scheduleOne(job({ routing_key: 'cut1' }));
    assert.equal(f.n, 2);
    assert.equal(j.routing_key, 'cut1');
    assert.deepEqual(await c.count({ routing_key: 'cut1' }), { count: 1, capped: false });
  } finally {
    await c.close();
    await f.close();
  }
});

// ---- per-item idempotency keys ----------------------------------------

test('item keys: a repeated key returns the existing job, another job with it is a conflict for that caller only', async () => {
  const c = new Client({ url: svc.url });
  try {
    const key = 'node-item-' + Date.now();
    const a = await c.schedule(job({ routing_key: 'ik' }), { idempotencyKey: key });
    const b = await c.schedule(job({ routing_key: 'ik' }), { idempotencyKey: key });
    assert.equal(b.id, a.id);
    const r = await Promise.allSettled([
      c.schedule(job({ routing_key: 'ik', body: 'other' }), { idempotencyKey: key }),
      c.schedule(job({ routing_key: 'ik' })),
    ]);
    assert.ok(r[0].reason instanceof ConflictError);
    assert.equal(r[0].reason.field, 'idempotency_key');
    assert.equal(r[1].status, 'fulfilled');
    assert.deepEqual(await c.count({ routing_key: 'ik' }), { count: 2, capped: false });
    const many = await c.scheduleMany([job({ routing_key: 'ik2' })], { idempotencyKeys: [key + '-m'] });
    const again = await c.scheduleMany([job({ routing_key: 'ik2' })], { idempotencyKeys: [key + '-m'] });
    assert.equal(again[0].id, many[0].id);
  } finally {
    await c.close();
  }
});

test('item keys: a batch whose answer was cut is retried and stored once', async () => {
  const f = await front(svc.url, (req, n) => (n === 0 ? 'reset' : null));
  const c = new Client({ url: f.url, retry: { attempts: 3, baseMs: 1, capMs: 5 } });
  try {
    const jobs = await Promise.all(Array.from({ length: 300 }, () => c.schedule(job({ routing_key: 'ikcut' }))));
    assert.equal(new Set(jobs.map((j) => j.id)).size, 300);
    assert.equal(f.n, 2);
    assert.deepEqual(await c.count({ routing_key: 'ikcut' }), { count: 300, capped: false });
  } finally {
    await c.close();
    await f.close();
  }
});
