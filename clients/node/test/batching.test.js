// schedule()'s batching against the real service: many concurrent calls in
// few requests, each caller its own job or its own error, the bound on
// pending calls, the byte budget, AbortSignal and timeouts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import {
  Client,
  InvalidArgumentError,
  ForbiddenError,
  PayloadTooLargeError,
  AbortError,
  TimeoutError,
} from '../index.js';
import { Service, CountingAgent } from '../testlib/service.js';

const job = (extra = {}) => ({ exchange: 'orders', routing_key: 'batch', body: 'b', delay_ms: 3600000, ...extra });
const batchRequests = (s) => s.metric('rmqs_http_requests_total{route="/schedule/batch"');

let svc;
before(async () => {
  svc = await new Service({ args: ['--allow-exchanges', 'orders', '--max-body-bytes', '262144'] }).start();
});
after(async () => {
  await svc.destroy();
});

test('10,000 concurrent schedule() calls: each its own job, in at most 100 HTTP requests', async () => {
  const agent = new CountingAgent();
  // 60 s per request: the service under ASan, beside another test, took up
  // to 2.7 s per 1,000-item batch, and the batches queue at its one writer.
  const c = new Client({ url: svc.url, agent, timeoutMs: 60000 });
  const before = await batchRequests(svc);
  const t0 = Date.now();
  const jobs = await Promise.all(
    Array.from({ length: 10000 }, (_, i) => c.schedule(job({ routing_key: 'tenk', body: { i } }))),
  );
  const ms = Date.now() - t0;
  const ids = new Set(jobs.map((j) => j.id));
  assert.equal(ids.size, 10000);
  const requests = (await batchRequests(svc)) - before;
  assert.ok(requests <= 100, `${requests} requests`);
  assert.equal(agent.requests, requests);
  assert.deepEqual(await c.count({ routing_key: 'tenk' }), { count: 10000, capped: false });
  // Each caller got the job of its own item.
  for (const i of [0, 4321, 9999]) assert.deepEqual((await c.get(jobs[i].id)).body, { i });
  console.log(`# 10000 schedule() calls: ${requests} requests, ${ms} ms`);
  await c.close();
  agent.destroy();
});

test('callers that each await their job share one request per round; a lone caller waits for nobody', async () => {
  const c = new Client({ url: svc.url });
  try {
    let before = await batchRequests(svc);
    // 16 callers, 10 jobs each, one at a time: the answer to a batch wakes
    // all 16 in one turn of the event loop, and their next calls go together.
    const ids = new Set();
    await Promise.all(
      Array.from({ length: 16 }, async (_, k) => {
        for (let i = 0; i < 10; i++) ids.add((await c.schedule(job({ routing_key: 'rounds', body: { k, i } }))).id);
      }),
    );
    assert.equal(ids.size, 160);
    const rounds = (await batchRequests(svc)) - before;
    assert.ok(rounds >= 10 && rounds <= 20, `${rounds} requests for 10 rounds of 16`);
    // One caller, one job at a time: each call is a request of its own, sent
    // at once (not held for more calls that cannot come).
    before = await batchRequests(svc);
    for (let i = 0; i < 20; i++) await c.schedule(job({ routing_key: 'lone', body: { i } }));
    assert.equal((await batchRequests(svc)) - before, 20);
    assert.deepEqual(await c.count({ routing_key: 'lone' }), { count: 20, capped: false });
  } finally {
    await c.close();
  }
});

test('invalid items: each of those callers gets its own error, the others their jobs (more than the 50 a 400 lists)', async () => {
  const c = new Client({ url: svc.url, lingerMs: 20 });
  const before = await batchRequests(svc);
  const calls = Array.from({ length: 1000 }, (_, i) => {
    if (i % 7 === 3) return c.schedule(job({ routing_key: 'mixed', delay_ms: -1 }));
    if (i === 600) return c.schedule(job({ routing_key: 'mixed', exchange: 'payments' }));
    if (i === 601) return c.schedule(job({ routing_key: 'mixed', colour: 'red' }));
    if (i === 602) return c.schedule(job({ routing_key: 'mixed', exchange: 'nope' }));
    return c.schedule(job({ routing_key: 'mixed', body: { i } }));
  });
  const results = await Promise.allSettled(calls);
  let ok = 0;
  results.forEach((r, i) => {
    if (i % 7 === 3) {
      assert.equal(r.status, 'rejected', `item ${i}`);
      assert.ok(r.reason instanceof InvalidArgumentError);
      assert.equal(r.reason.field, 'delay_ms');
      assert.match(r.reason.message, /negative/);
    } else if (i === 600 || i === 602) {
      assert.ok(r.reason instanceof ForbiddenError, `item ${i}: ${r.reason}`);
      assert.equal(r.reason.field, 'exchange');
    } else if (i === 601) {
      assert.ok(r.reason instanceof InvalidArgumentError);
      assert.equal(r.reason.field, 'colour');
    } else {
      assert.equal(r.status, 'fulfilled', `item ${i}: ${r.reason}`);
      ok++;
    }
  });
  assert.equal(ok, 1000 - 143 - 3);
  assert.deepEqual(await c.count({ routing_key: 'mixed' }), { count: ok, capped: false });
  const requests = (await batchRequests(svc)) - before;
  // 143 + 1 invalid: 50 per 400, so 3 answers of 400, then 2 of 403, then the 201.
  assert.ok(requests <= 8, `${requests} requests`);
  await c.close();
});

test('back-pressure: never more than maxOutstanding calls pending, the rest wait their turn', async () => {
  const c = new Client({ url: svc.url, maxOutstanding: 50, maxBatch: 20, lingerMs: 1 });
  let peak = 0;
  let peakBuf = 0;
  const watch = setInterval(() => {
    peak = Math.max(peak, c.outstanding);
    peakBuf = Math.max(peakBuf, c.buf.length);
  }, 1);
  const calls = [];
  for (let i = 0; i < 2000; i++) {
    calls.push(c.schedule(job({ routing_key: 'bp' })));
    peak = Math.max(peak, c.outstanding);
  }
  assert.equal(c.outstanding, 50);
  assert.equal(c.waiters.length, 1950);
  const done = await Promise.all(calls);
  clearInterval(watch);
  assert.equal(done.length, 2000);
  assert.ok(peak <= 50, `peak ${peak}`);
  assert.ok(peakBuf <= 50);
  assert.equal(c.outstanding, 0);
  assert.deepEqual(await c.count({ routing_key: 'bp' }), { count: 2000, capped: false });
  await c.close();
});

test('maxBatchBytes cuts batches by size; a 413 splits a batch; one item too large fails alone', async () => {
  const agent = new CountingAgent();
  const c = new Client({ url: svc.url, agent, maxBatchBytes: 100 * 1024 });
  const body = 'x'.repeat(10 * 1024);
  await Promise.all(Array.from({ length: 50 }, () => c.schedule(job({ routing_key: 'bytes', body }))));
  // About 10 items per request (100 KiB of 10 KiB bodies).
  assert.ok(agent.paths['/schedule/batch'] >= 5 && agent.paths['/schedule/batch'] <= 8, JSON.stringify(agent.paths));
  await c.close();

  // A budget above the service's --max-body-bytes (256 KiB): 413, halves.
  const big = new Client({ url: svc.url, maxBatchBytes: 900 * 1024 });
  const r = await Promise.allSettled([
    ...Array.from({ length: 60 }, () => big.schedule(job({ routing_key: 'split', body }))),
    big.schedule(job({ routing_key: 'split', body: 'y'.repeat(300 * 1024) })),
  ]);
  assert.equal(r.filter((x) => x.status === 'fulfilled').length, 60);
  assert.ok(r[60].reason instanceof PayloadTooLargeError);
  assert.deepEqual(await big.count({ routing_key: 'split' }), { count: 60, capped: false });
  await big.close();
  agent.destroy();
});

test('AbortSignal: before the call, while buffered (nothing sent), while waiting for room; timeoutMs', async () => {
  const c = new Client({ url: svc.url, lingerMs: 200 });
  await assert.rejects(c.schedule(job(), { signal: AbortSignal.abort() }), AbortError);
  const ac = new AbortController();
  const p = c.schedule(job({ routing_key: 'abort' }), { signal: ac.signal });
  const kept = c.schedule(job({ routing_key: 'abort' }));
  setTimeout(() => ac.abort(), 10);
  await assert.rejects(p, (e) => e instanceof AbortError && e.code === 'aborted');
  await kept;
  assert.deepEqual(await c.count({ routing_key: 'abort' }), { count: 1, capped: false });
  await assert.rejects(c.get('x', { signal: AbortSignal.abort() }), AbortError);
  await c.close();

  const tight = new Client({ url: svc.url, maxOutstanding: 1, lingerMs: 50 });
  const first = tight.schedule(job({ routing_key: 'abort2' }));
  const ac2 = new AbortController();
  const waiting = tight.schedule(job({ routing_key: 'abort2' }), { signal: ac2.signal });
  assert.equal(tight.waiters.length, 1);
  ac2.abort();
  await assert.rejects(waiting, AbortError);
  assert.equal(tight.waiters.length, 0);
  await first;
  await tight.close();

  // A server that accepts and never answers: TimeoutError per request.
  const held = new Set();
  const mute = net.createServer((sock) => held.add(sock));
  await new Promise((r) => mute.listen(0, '127.0.0.1', r));
  const slow = new Client({ url: `http://127.0.0.1:${mute.address().port}`, timeoutMs: 150 });
  const t0 = Date.now();
  await assert.rejects(slow.status(), (e) => e instanceof TimeoutError && e.code === 'timeout');
  await assert.rejects(slow.schedule(job()), TimeoutError);
  assert.ok(Date.now() - t0 < 2000);
  // The caller's own signal ends a call that waits for an answer.
  await assert.rejects(slow.get('x', { signal: AbortSignal.timeout(50) }), AbortError);
  await slow.close();
  for (const sock of held) sock.destroy();
  await new Promise((r) => mute.close(r));
});
