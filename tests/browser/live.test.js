// A job scheduled over HTTP appears in the list, and its page shows its
// status change to sent without a reload (a real queue receives it).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service, launch, openPage, visit, queue, waitFor } from './harness.js';

let svc, browser, q;
before(async () => {
  svc = await new Service({ args: ['--ui', 'on'] }).start();
  browser = await launch();
  q = await queue();
});
after(async () => {
  await browser?.close();
  await q?.close();
  await svc?.stop();
});

test('a job scheduled over HTTP appears and turns to sent live', async () => {
  const { page, rec } = await openPage(browser, svc);
  const job = await svc.schedule({ exchange: '', routing_key: q.name, delay_ms: 4000, body: 'live one' });
  await visit(page, svc, '#/jobs?status=pending');
  await page.locator(`a[href="#/jobs/${job.id}"]`).waitFor({ timeout: 10000 });
  await page.locator(`a[href="#/jobs/${job.id}"]`).click();
  await page.locator('#job-status').getByText('pending').waitFor({ timeout: 10000 });
  // No reload from here: the page's own refresh must show it.
  await page.locator('#job-status').getByText('sent').waitFor({ timeout: 30000 });
  assert.equal((await svc.job(job.id)).status, 'sent');
  await page.locator('[data-field="sent_at"] time').waitFor();
  assert.deepEqual(rec.errors, []);
});

test('the overview counts follow the store', async () => {
  const { page } = await openPage(browser, svc);
  await visit(page, svc, '#/');
  const pending = page.locator('[data-status="pending"]');
  await pending.waitFor();
  const before = Number(await pending.textContent());
  await svc.schedule({ exchange: '', routing_key: q.name, delay_ms: 600000, body: 'later' });
  await waitFor(
    'the pending count to go up',
    async () => Number(await pending.textContent()) === before + 1,
    20000,
    200,
  );
  assert.equal(await page.locator('[data-health="database"]').textContent(), 'up');
  assert.equal(await page.locator('[data-health="broker"]').textContent(), 'up');
});
