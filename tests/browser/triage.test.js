// At 3 a.m.: the trouble banner while the broker is away (since when, the
// error, how many jobs are overdue) and gone when it is back; a failed job
// that opens with its error, what the broker's answer means and each
// attempt; the Overview's top failure reasons. The broker outage is real:
// the lane's RabbitMQ node stopped (stop_app) and started again.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { execFileSync } from 'node:child_process';
import amqplib from 'amqplib';
import { Service, launch, openPage, visit, axe, waitFor } from './harness.js';

// The lane's own RabbitMQ node (tests/run.sh starts one per lane; a test
// holds its lane alone): stop_app closes every connection and the AMQP
// port, start_app brings it back.
function rabbit(action) {
  execFileSync('rabbitmqctl', ['-n', process.env.RMQS_TEST_RABBIT_NODE, action], {
    stdio: ['ignore', 'ignore', 'pipe'],
    timeout: 90000,
  });
}
const amqpOpen = () =>
  new Promise((resolve) => {
    const c = net.connect(Number(process.env.RMQS_TEST_AMQP_PORT), '127.0.0.1');
    c.once('connect', () => resolve(c.destroy() || true));
    c.once('error', () => resolve(false));
  });

let svc, browser;
const BAD_EXCHANGE = 'triage-no-such-exchange';
before(
  async () => {
    svc = await new Service({ args: ['--ui', 'on', '--backoff-base-ms', '200'] }).start();
    browser = await launch();
  },
  { timeout: 60000 },
);
after(async () => {
  await browser?.close();
  await svc?.stop();
});

test('a failed job opens with its error, what it means, and every attempt', async () => {
  const job = await svc.schedule({ exchange: BAD_EXCHANGE, routing_key: 'k', body: 'x', delay_ms: 0, max_attempts: 3 });
  const failed = await waitFor('the job to fail', async () => {
    const j = await svc.job(job.id);
    return j.status === 'failed' && j;
  });
  assert.ok(failed.failed_at, 'failed_at is set');
  const { page, rec } = await openPage(browser, svc);
  await visit(page, svc, '#/jobs/' + job.id);
  const callout = page.locator('#error-callout');
  await callout.waitFor();
  assert.match(await callout.locator('h2').textContent(), /Failed after 3 attempts/);
  assert.match(await page.locator('#error-text').textContent(), /NOT_FOUND - no exchange 'triage-no-such-exchange'/);
  assert.match(await page.locator('#error-hint').textContent(), /exchange does not exist/);
  // Every attempt, oldest first, each with the broker's answer.
  const attempts = page.locator('#attempts li');
  assert.equal(await attempts.count(), 3);
  for (let i = 0; i < 3; i++) {
    const t = await attempts.nth(i).textContent();
    assert.match(t, new RegExp(`^Attempt ${i + 1}`));
    assert.match(t, /no exchange/);
  }
  assert.deepEqual(await axe(page), []);
  assert.deepEqual(rec.console, []);
  assert.deepEqual(rec.errors, []);
});

test('the Overview names the top failure reasons, linked to their jobs', async () => {
  const { page } = await openPage(browser, svc);
  await visit(page, svc, '#/');
  const row = page.locator('#failures tbody tr', { hasText: BAD_EXCHANGE });
  await row.waitFor({ timeout: 30000 });
  assert.match(await row.textContent(), /NOT_FOUND/);
  await row.getByRole('link', { name: BAD_EXCHANGE }).click();
  await page.waitForURL(/#\/jobs\?/);
  assert.match(page.url(), /status=failed/);
  assert.match(page.url(), new RegExp('exchange=' + BAD_EXCHANGE));
  // The failed count stands out.
  await visit(page, svc, '#/');
  const failed = page.locator('[data-status="failed"]');
  await failed.waitFor();
  assert.match((await failed.getAttribute('class')) || '', /\bdown\b/);
});

test('the banner says the broker is down, since when and how many jobs are overdue, and goes when it is back', async () => {
  // A durable queue, so it is still there when the node is back.
  const qname = `triage-${process.pid}-${Date.now()}`;
  const declare = async (fn) => {
    const conn = await amqplib.connect(process.env.RMQS_TEST_AMQP_URL);
    try {
      await fn(await conn.createChannel());
    } finally {
      await conn.close();
    }
  };
  await declare((ch) => ch.assertQueue(qname, { durable: true }));
  let stopped = false;
  try {
    const { page, rec } = await openPage(browser, svc);
    await visit(page, svc, '#/jobs');
    const banner = page.locator('#banner');
    assert.equal(await banner.isHidden(), true, 'no banner while all is well');
    rabbit('stop_app');
    stopped = true;
    await waitFor('the AMQP port to close', async () => !(await amqpOpen()), 30000, 200);
    const ids = [];
    for (let i = 0; i < 4; i++)
      ids.push((await svc.schedule({ exchange: '', routing_key: qname, body: 'b' + i, delay_ms: 0 })).id);
    await banner.locator('[data-trouble="broker"]').waitFor({ timeout: 30000 });
    const text = await banner.textContent();
    assert.match(text, /Broker down since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d/);
    assert.equal(await banner.getAttribute('role'), 'alert');
    await banner.locator('[data-trouble="overdue"]').waitFor({ timeout: 30000 });
    assert.match(await banner.locator('[data-trouble="overdue"]').textContent(), /[1-4] jobs? overdue/);
    // Marked in the list.
    await visit(page, svc, '#/jobs?status=pending');
    await page.locator(`tr[data-job="${ids[0]}"] .badge.overdue`).waitFor({ timeout: 15000 });
    // On every page.
    await visit(page, svc, '#/schedules');
    await banner.locator('[data-trouble="broker"]').waitFor({ timeout: 15000 });
    assert.deepEqual(await axe(page), []);
    rabbit('start_app');
    stopped = false;
    await waitFor('the AMQP port to open', amqpOpen, 60000, 200);
    await waitFor(
      'the jobs to be sent after the broker is back',
      async () => {
        for (const id of ids) if ((await svc.job(id)).status !== 'sent') return false;
        return true;
      },
      60000,
      250,
    );
    await banner.waitFor({ state: 'hidden', timeout: 20000 });
    assert.deepEqual(rec.errors, []);
  } finally {
    if (stopped) rabbit('start_app');
    await waitFor('the AMQP port to open', amqpOpen, 60000, 200);
    await declare((ch) => ch.deleteQueue(qname));
  }
});

test('failed jobs bring their error and failed-at columns to the list', async () => {
  const { page } = await openPage(browser, svc);
  await visit(page, svc, '#/jobs?status=failed');
  const row = page.locator('#list tbody tr').first();
  await row.waitFor();
  assert.match(await row.locator('td.c-err').textContent(), /NOT_FOUND - no exchange/);
  assert.match(await row.locator('td.c-failed').textContent(), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
  assert.deepEqual(await axe(page), []);
});

test('the Jobs page opens newest first and follows new jobs until paused', async () => {
  const far = (m) => new Date(Date.now() + m * 60000).toISOString();
  // Due times the other way round: newest created first is not due order.
  const a = await svc.schedule({ exchange: 'amq.direct', routing_key: 'k', body: 'a', deliver_at: far(90) });
  const b = await svc.schedule({ exchange: 'amq.direct', routing_key: 'k', body: 'b', deliver_at: far(60) });
  const { page } = await openPage(browser, svc);
  await visit(page, svc, '#/jobs');
  const first = () => page.locator('#list tbody tr').first().getAttribute('data-job');
  await waitFor('the newest job first', async () => (await first()) === b.id);
  const ids = await page.locator('#list tbody tr').evaluateAll((rs) => rs.map((r) => r.dataset.job));
  assert.ok(ids.indexOf(b.id) < ids.indexOf(a.id), 'created order, newest first');
  // A job made now shows at the top without a reload.
  const c = await svc.schedule({ exchange: 'amq.direct', routing_key: 'k', body: 'c', deliver_at: far(30) });
  await waitFor('the new job to appear', async () => (await first()) === c.id, 15000, 200);
  // Paused: the list stays as it is through two refresh periods.
  await page.locator('#live-toggle').click();
  assert.equal(await page.locator('#live-toggle').getAttribute('aria-pressed'), 'false');
  const listed = [];
  page.on('request', (r) => r.url().includes('/jobs?') && listed.push(r.url()));
  const d = await svc.schedule({ exchange: 'amq.direct', routing_key: 'k', body: 'd', deliver_at: far(20) });
  await page.waitForTimeout(11000); // two refresh periods: what is asserted is that nothing came
  assert.equal(listed.length, 0, 'no list request while paused');
  assert.equal(await first(), c.id);
  await page.locator('#live-toggle').click();
  await waitFor('resumed: the job made while paused', async () => (await first()) === d.id, 15000, 200);
  // The order is in the URL once chosen, and the due order is there too.
  await visit(page, svc, '#/jobs?order=due&exchange=amq.direct');
  await page.locator('#list tbody tr').first().waitFor();
  const due = await page.locator('#list tbody tr').evaluateAll((rs) => rs.map((r) => r.dataset.job));
  assert.ok(due.indexOf(d.id) < due.indexOf(c.id) && due.indexOf(c.id) < due.indexOf(b.id), 'due order');
});

test('a failing schedule is marked, says why, and can be run now', async () => {
  const name = 'triage-failing';
  const put = await svc.api('PUT', '/schedules/' + name, {
    every_ms: 1000,
    job: { exchange: BAD_EXCHANGE, routing_key: 'k', body: 'tick', max_attempts: 1 },
  });
  assert.ok(put.status === 201 || put.status === 200, JSON.stringify(put.body));
  await waitFor(
    'two failed runs in a row',
    async () => (await svc.api('GET', '/schedules/' + name)).body.failure_streak >= 2,
    30000,
    200,
  );
  const { page } = await openPage(browser, svc);
  await visit(page, svc, '#/schedules');
  const row = page.locator(`tr[data-schedule="${name}"]`);
  await row.waitFor();
  assert.match((await row.getAttribute('class')) || '', /sched-failing/);
  assert.match(await row.textContent(), /failing/);
  assert.match(await row.textContent(), /failed runs in a row/);
  assert.deepEqual(await axe(page), []);
  await visit(page, svc, '#/schedules/' + name);
  await page.locator('#failing-callout').waitFor();
  assert.match(await page.locator('#failing-error').textContent(), /NOT_FOUND - no exchange/);
  // Its latest runs first, each with its error.
  const runs = page.locator('.table-wrap[aria-label^="Jobs of this schedule"] tbody tr');
  await runs.first().waitFor();
  // The newest due first (the next run, made ahead of its time, may head
  // the list), then the failed ones with the broker's answer.
  const due = await runs.locator('time').evaluateAll((ts) => ts.map((t) => Date.parse(t.getAttribute('datetime'))));
  assert.ok(due.length >= 2, 'several runs listed');
  for (let i = 1; i < due.length; i++) assert.ok(due[i - 1] >= due[i], 'latest first');
  await runs.filter({ hasText: 'NOT_FOUND - no exchange' }).first().waitFor();
  // Paused, Run now still makes one run, at once.
  await svc.api('PATCH', '/schedules/' + name, { paused: true });
  const before = (await svc.api('GET', '/jobs/count?schedule=' + name)).body.count;
  await page.locator('#run-schedule-now').click();
  await waitFor(
    'the run made now',
    async () => (await svc.api('GET', '/jobs/count?schedule=' + name)).body.count === before + 1,
    15000,
    200,
  );
  assert.match(await page.locator('#toast').textContent(), /Run created/);
  await svc.api('DELETE', '/schedules/' + name);
});
