// Cancel, reschedule, run now and retry, each done by clicks in the job's
// page, take effect in the API.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service, launch, openPage, visit, queue, waitFor, inMinutes } from './harness.js';

let svc, browser, q;
before(async () => {
  svc = await new Service({ args: ['--ui', 'on', '--backoff-base-ms', '100'] }).start();
  browser = await launch();
  q = await queue();
});
after(async () => {
  await browser?.close();
  await q?.close();
  await svc?.stop();
});

async function jobPage(id) {
  const { page, rec } = await openPage(browser, svc);
  await visit(page, svc, '#/jobs/' + id);
  await page.locator('#job-status').waitFor();
  return { page, rec };
}

test('cancel by click (with its confirmation)', async () => {
  const j = await svc.schedule({ exchange: '', routing_key: q.name, deliver_at: inMinutes(30), body: 'c' });
  const { page } = await jobPage(j.id);
  await page.getByRole('button', { name: 'Cancel…' }).click();
  const dialog = page.getByRole('dialog', { name: 'Cancel job' });
  await dialog.waitFor();
  await dialog.getByRole('button', { name: 'Cancel job' }).click();
  await waitFor('cancelled', async () => (await svc.job(j.id)).status === 'cancelled');
  await page.locator('#job-status').getByText('cancelled').waitFor();
});

test('reschedule by click: the datetime input sets deliver_at', async () => {
  const j = await svc.schedule({ exchange: '', routing_key: q.name, deliver_at: inMinutes(30), body: 'r' });
  const { page } = await jobPage(j.id);
  const target = new Date(Date.now() + 3 * 3600 * 1000);
  // Seconds never 0: Chromium shows a datetime-local value of hh:mm:00 as
  // hh:mm, and playwright's fill then calls the value it set "Malformed"
  // (it failed one run in 60, both stores at once in neighbouring lanes).
  target.setSeconds(30, 0);
  const p = (n) => String(n).padStart(2, '0');
  const local = `${target.getFullYear()}-${p(target.getMonth() + 1)}-${p(target.getDate())}T${p(target.getHours())}:${p(target.getMinutes())}:${p(target.getSeconds())}`;
  await page.getByLabel('New due time (local)').fill(local);
  await page.getByRole('button', { name: 'Reschedule' }).click();
  await waitFor('rescheduled', async () => (await svc.job(j.id)).deliver_at === target.toISOString());
});

test('run now by click: a job due in an hour is sent now', async () => {
  const j = await svc.schedule({ exchange: '', routing_key: q.name, deliver_at: inMinutes(60), body: 'n' });
  const { page } = await jobPage(j.id);
  await page.getByRole('button', { name: 'Run now' }).click();
  await waitFor('sent', async () => (await svc.job(j.id)).status === 'sent', 20000);
  await page.locator('#job-status').getByText('sent').waitFor({ timeout: 10000 });
});

test('retry by click: a failed job goes back to pending, attempts reset, and is sent', async () => {
  // Its queue does not exist yet: 312 NO_ROUTE, failed after its 1 attempt.
  const name = 'rmqs-retry-' + process.pid + '-' + Date.now();
  const j = await svc.schedule({ exchange: '', routing_key: name, delay_ms: 0, max_attempts: 1, body: 'f' });
  const failed = await waitFor(
    'failed',
    async () => {
      const now = await svc.job(j.id);
      return now.status === 'failed' ? now : null;
    },
    20000,
  );
  assert.ok(failed.last_error, 'the failure is recorded');
  const late = await queue(name);
  try {
    const { page } = await jobPage(j.id);
    await page.locator('#job-status').getByText('failed').waitFor();
    assert.equal(await page.getByRole('button', { name: 'Run now' }).count(), 0, 'no run-now on a failed job');
    await page.getByRole('button', { name: 'Retry' }).click();
    const sent = await waitFor(
      'sent after the retry',
      async () => {
        const now = await svc.job(j.id);
        return now.status === 'sent' ? now : null;
      },
      20000,
    );
    assert.equal(sent.attempts, 1, 'attempts were reset before the new one');
    // Documented: last_error is kept for history after a successful
    // publish (only a new failed attempt replaces it).
    assert.equal(sent.last_error, failed.last_error, 'last_error kept');
  } finally {
    await late.close();
  }
});
