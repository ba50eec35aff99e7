// Every call of the client once, against the real service, and the typed
// error of each code the service can be made to answer here.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as rmqs from '../index.js';
import { Service } from '../testlib/service.js';

const {
  Client,
  RmqsError,
  InvalidArgumentError,
  NotFoundError,
  ConflictError,
  UnauthorizedError,
  ForbiddenError,
  UiReadOnlyError,
  CrossOriginError,
  HostNotAllowedError,
  MethodNotAllowedError,
  PayloadTooLargeError,
  UnsupportedMediaTypeError,
  StorageFullError,
  errorClasses,
} = rmqs;

const job = (extra = {}) => ({
  exchange: 'orders',
  routing_key: 'order.reminder',
  body: { n: 1 },
  delay_ms: 3600000,
  ...extra,
});

let svc;
let c;
before(async () => {
  svc = await new Service({ args: ['--allow-exchanges', 'orders,billing', '--max-body-bytes', '65536'] }).start();
  c = new Client({ url: svc.url });
});
after(async () => {
  await c.close();
  await svc.destroy();
});

test('schedule() resolves to the JobMinimal; get() reads the whole job', async () => {
  const m = await c.schedule(job({ headers: { tenant: 'acme' } }));
  assert.deepEqual(Object.keys(m).sort(), ['deliver_at', 'id', 'status']);
  assert.equal(m.status, 'pending');
  const j = await c.get(m.id);
  assert.equal(j.id, m.id);
  assert.equal(j.exchange, 'orders');
  assert.deepEqual(j.headers, { tenant: 'acme' });
  assert.deepEqual(j.body, { n: 1 });
});

test('scheduleOne() sends an Idempotency-Key: the same key again is the same job (200), another request 409', async () => {
  const key = 'node-client-' + Date.now();
  const a = await c.scheduleOne(job(), { idempotencyKey: key });
  assert.equal(a.source, 'http');
  const b = await c.scheduleOne(job(), { idempotencyKey: key });
  assert.equal(b.id, a.id);
  const m = await c.scheduleOne(job(), { minimal: true });
  assert.deepEqual(Object.keys(m).sort(), ['deliver_at', 'id', 'status']);
  await assert.rejects(c.scheduleOne(job({ body: 'other' }), { idempotencyKey: key }), (e) => {
    assert.ok(e instanceof ConflictError && e instanceof RmqsError);
    assert.equal(e.status, 409);
    assert.equal(e.code, 'conflict');
    assert.equal(e.field, 'Idempotency-Key');
    return true;
  });
});

test('scheduleMany() chunks to maxBatch and keeps the order; a refused chunk names indexes of the whole array', async () => {
  const small = new Client({ url: svc.url, maxBatch: 7 });
  try {
    const jobs = Array.from({ length: 30 }, (_, i) => job({ body: { i } }));
    const out = await small.scheduleMany(jobs);
    assert.equal(out.length, 30);
    const full = await small.scheduleMany(jobs.slice(0, 2), { minimal: false });
    assert.deepEqual(full[1].body, { i: 1 });
    const first = await small.get(out[0].id);
    const last = await small.get(out[29].id);
    assert.deepEqual([first.body, last.body], [{ i: 0 }, { i: 29 }]);
    jobs[17] = job({ delay_ms: -1 });
    await assert.rejects(small.scheduleMany(jobs), (e) => {
      assert.ok(e instanceof InvalidArgumentError);
      assert.deepEqual(
        e.errors.map((x) => x.index),
        [17],
      );
      assert.equal(e.scheduled.length, 14); // chunks 0-6 and 7-13
      return true;
    });
    jobs[17] = job({ exchange: 'payments' });
    await assert.rejects(
      small.scheduleMany(jobs),
      (e) => e instanceof ForbiddenError && e.field === 'jobs[17].exchange',
    );
  } finally {
    await small.close();
  }
});

test('list() follows next across pages, with filters and order; count()', async () => {
  const tag = 'lst' + Date.now();
  await c.scheduleMany(Array.from({ length: 25 }, (_, i) => job({ routing_key: tag, delay_ms: 1000000 + i })));
  const seen = [];
  for await (const j of c.list({ routing_key: tag, status: 'pending', order: '-due' }, { pageSize: 10 })) seen.push(j);
  assert.equal(seen.length, 25);
  assert.ok(seen[0].deliver_at >= seen[24].deliver_at);
  assert.deepEqual(await c.count({ routing_key: tag }), { count: 25, capped: false });
  const capped = await c.count({ routing_key: tag }, { max: 5 });
  assert.equal(capped.capped, true);
  await assert.rejects(c.count({ q: 'ab' }), (e) => e instanceof InvalidArgumentError && e.field === 'q');
});

test('reschedule(), runNow(), cancel(), retry() of a job', async () => {
  const m = await c.schedule(job());
  const at = new Date(Date.now() + 7200000);
  const r = await c.reschedule(m.id, { deliverAt: at });
  assert.equal(r.deliver_at, at.toISOString());
  const r2 = await c.reschedule(m.id, { delayMs: 5000000 });
  assert.ok(Date.parse(r2.deliver_at) > Date.now() + 4000000);
  // The broker is down here: a job run now stays pending (or publishing).
  const run = await c.runNow(m.id);
  assert.ok(Date.parse(run.deliver_at) <= Date.now() + 1000);
  const m2 = await c.schedule(job());
  await assert.rejects(c.retry(m2.id), (e) => e instanceof ConflictError && /pending/.test(e.message));
  await assert.rejects(c.retry(m2.id, { delayMs: 1000 }), ConflictError);
  const x = await c.cancel(m2.id);
  assert.equal(x.status, 'cancelled');
  assert.equal((await c.cancel(m2.id)).status, 'cancelled');
  await assert.rejects(c.reschedule(m2.id, { delayMs: 1 }), ConflictError);
  await assert.rejects(c.get('01936f3a-5b1c-7d2e-9f00-1a2b3c4d5e6f'), (e) => {
    assert.ok(e instanceof NotFoundError);
    assert.equal(e.status, 404);
    return true;
  });
});

test('bulk(), bulkStatus(), waitBulk() with progress', async () => {
  const tag = 'blk' + Date.now();
  await c.scheduleMany(Array.from({ length: 40 }, () => job({ routing_key: tag })));
  await assert.rejects(c.bulk({ action: 'cancel' }), InvalidArgumentError);
  const op = await c.bulk({ action: 'cancel', filter: { routing_key: tag, status: 'pending' } });
  assert.ok(op.id);
  assert.equal((await c.bulkStatus(op.id)).id, op.id);
  const seen = [];
  const done = await c.waitBulk(op.id, { onProgress: (o) => seen.push(o.state), intervalMs: 20 });
  assert.equal(done.state, 'done');
  assert.equal(done.done, 40);
  assert.ok(seen.length >= 1);
  assert.deepEqual(await c.count({ routing_key: tag, status: 'cancelled' }), { count: 40, capped: false });
  await assert.rejects(c.bulkStatus('01936f3c-1111-7a00-8b00-000000000009'), NotFoundError);
});

test('schedules: put, get, list, patch, run, delete', async () => {
  const spec = { cron: '0 3 * * *', timezone: 'UTC', job: { exchange: 'orders', routing_key: 'digest', body: 'd' } };
  const s = await c.putSchedule('node-digest', spec);
  assert.equal(s.name, 'node-digest');
  const again = await c.putSchedule('node-digest', spec);
  assert.equal(again.generation, s.generation);
  await c.putSchedule('node-digest-2', { every_ms: 3600000, job: spec.job });
  const g = await c.getSchedule('node-digest', { count: 3 });
  assert.equal(g.next_runs.length, 3);
  const names = [];
  for await (const x of c.listSchedules({ pageSize: 1 })) names.push(x.name);
  assert.deepEqual(names, ['node-digest', 'node-digest-2']);
  const p = await c.patchSchedule('node-digest', { paused: true });
  assert.equal(p.paused, true);
  const run = await c.runSchedule('node-digest', { idempotencyKey: 'node-run-1' });
  assert.equal(run.source, 'schedule');
  assert.equal((await c.runSchedule('node-digest', { idempotencyKey: 'node-run-1' })).id, run.id);
  await assert.rejects(c.putSchedule('node-bad', { cron: '0 0 32 * *', job: spec.job }), (e) => {
    return e instanceof InvalidArgumentError && e.field === 'cron';
  });
  await assert.rejects(c.putSchedule('bad name', spec), (e) => e instanceof InvalidArgumentError && e.field === 'name');
  assert.equal(await c.deleteSchedule('node-digest'), undefined);
  await c.deleteSchedule('node-digest-2');
  await assert.rejects(c.getSchedule('node-digest'), NotFoundError);
});

test('limits: put, get, list, patch, delete', async () => {
  const l = await c.putLimit('node-limit', { match: { exchange: 'orders' }, rate_per_s: 500, burst: 50 });
  assert.equal(l.generation, 1);
  assert.equal((await c.getLimit('node-limit')).rate_per_s, 500);
  assert.deepEqual(
    (await c.listLimits()).map((x) => x.name),
    ['node-limit'],
  );
  const p = await c.patchLimit('node-limit', { rate_per_s: 200 });
  assert.equal(p.rate_per_s, 200);
  await assert.rejects(c.putLimit('node-limit', { rate_per_s: 0 }), (e) => e.field === 'rate_per_s');
  assert.equal(await c.deleteLimit('node-limit'), undefined);
  await assert.rejects(c.getLimit('node-limit'), NotFoundError);
  await assert.rejects(c.deleteLimit('node-limit'), NotFoundError);
});

test('stats(), status(), failures()', async () => {
  const st = await c.stats({ window: '15m' });
  assert.ok(Array.isArray(st.samples));
  await assert.rejects(c.stats({ window: 'forever' }), InvalidArgumentError);
  const s = await c.status();
  assert.equal(s.broker.state, process.env.RMQS_TEST_AMQP_URL ? 'up' : 'down');
  assert.equal(s.database.state, 'up');
  const f = await c.failures();
  assert.ok(Array.isArray(f.groups));
});

// With a real RabbitMQ (tests/run.sh): a due job goes to the broker, and
// get() follows it there. The exchange does not exist on the node, so the
// broker closes the channel and the one attempt ends the job as failed,
// with the broker's reason.
test('a due job is published and get() shows what the broker said', async (t) => {
  if (!process.env.RMQS_TEST_AMQP_URL) return t.skip('no RabbitMQ (RMQS_TEST_AMQP_URL)');
  const j = await c.schedule({ exchange: 'orders', routing_key: 'node.due', body: {}, delay_ms: 0, max_attempts: 1 });
  const end = Date.now() + 30000;
  let g;
  while ((g = await c.get(j.id)).status !== 'failed' && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
  assert.equal(g.status, 'failed', JSON.stringify(g));
  assert.equal(g.attempts, 1);
  assert.match(g.last_error, /orders/);
});

test('every documented error code has its exported class', () => {
  const codes = [
    'invalid_argument',
    'unauthorized',
    'forbidden',
    'ui_read_only',
    'cross_origin',
    'host_not_allowed',
    'not_found',
    'method_not_allowed',
    'conflict',
    'payload_too_large',
    'unsupported_media_type',
    'unavailable',
    'storage_full',
    'search_timeout',
    'internal',
  ];
  assert.deepEqual(Object.keys(errorClasses).sort(), [...codes].sort());
  for (const code of codes) {
    const Cls = errorClasses[code];
    const name = code.replace(/(^|_)(.)/g, (_, __, ch) => ch.toUpperCase()) + 'Error';
    assert.equal(Cls.name, name);
    assert.equal(rmqs[name], Cls);
    assert.ok(new Cls('x') instanceof RmqsError);
  }
});

test('typed errors the service answers: 403 forbidden, 405, 413, 415, 403 browser refusals', async () => {
  await assert.rejects(c.scheduleOne(job({ exchange: 'payments' })), (e) => {
    assert.ok(e instanceof ForbiddenError);
    assert.equal(e.field, 'exchange');
    return true;
  });
  await assert.rejects(c.request('PUT', '/jobs', { body: {} }), (e) => {
    assert.ok(e instanceof MethodNotAllowedError);
    assert.equal(e.status, 405);
    return true;
  });
  await assert.rejects(c.scheduleOne(job({ body: 'x'.repeat(70000) })), (e) => {
    assert.ok(e instanceof PayloadTooLargeError);
    assert.equal(e.status, 413);
    return true;
  });
  await assert.rejects(
    c.request('POST', '/schedule', { rawBody: 'exchange=orders', headers: { 'Content-Type': 'text/plain' } }),
    UnsupportedMediaTypeError,
  );
  const browser = new Client({ url: svc.url, headers: { Origin: 'https://evil.example' } });
  await assert.rejects(browser.cancel('01936f3a-5b1c-7d2e-9f00-1a2b3c4d5e6f'), (e) => {
    assert.ok(e instanceof CrossOriginError && !(e instanceof ForbiddenError));
    assert.equal(e.status, 403);
    return true;
  });
  await browser.close();
  const sameOrigin = new Client({ url: svc.url, headers: { Origin: svc.url } });
  await assert.rejects(sameOrigin.schedule(job()), UiReadOnlyError);
  await sameOrigin.close();
  const rebinding = new Client({ url: svc.url, headers: { Host: 'rebind.example' } });
  await assert.rejects(rebinding.get('x'), HostNotAllowedError);
  await rebinding.close();
});

test('401 unauthorized without the token; Bearer token with it', async () => {
  const s = await new Service({ token: 'node-client-token-0123456789' }).start();
  try {
    const none = new Client({ url: s.url });
    await assert.rejects(none.status(), (e) => e instanceof UnauthorizedError && e.status === 401);
    await assert.rejects(none.schedule(job()), UnauthorizedError);
    await none.close();
    const ok = new Client({ url: s.url, token: 'node-client-token-0123456789' });
    const m = await ok.schedule(job());
    assert.equal((await ok.get(m.id)).id, m.id);
    await ok.close();
  } finally {
    await s.destroy();
  }
});

test('503 storage_full is a StorageFullError once the retries are spent', async (t) => {
  // --min-free-bytes watches the disk of a SQLite file; PostgreSQL's disk is
  // the server's, which this test cannot fill.
  if (process.env.RMQS_TEST_STORE === 'postgres') return t.skip('SQLite only: --min-free-bytes');
  const s = await new Service({ args: ['--min-free-bytes', String(2 ** 62)] }).start();
  try {
    const cl = new Client({ url: s.url, retry: { attempts: 2, baseMs: 1, capMs: 5 } });
    await assert.rejects(cl.schedule(job()), (e) => {
      assert.ok(e instanceof StorageFullError);
      assert.equal(e.status, 503);
      return true;
    });
    // Two attempts: the first 503 was retried once.
    assert.equal(await s.metric('rmqs_http_requests_total{route="/schedule/batch",method="POST",status="503"}'), 2);
    await cl.close();
  } finally {
    await s.destroy();
  }
});
