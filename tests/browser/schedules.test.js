// A schedule made by PUT /schedules appears with its next runs; pause and
// resume by click take effect in the API; delete asks first.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service, launch, openPage, visit, waitFor } from './harness.js';

let svc, browser;
before(async () => {
  svc = await new Service({ args: ['--ui', 'on'] }).start();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await svc?.stop();
});

test('a schedule appears with its next runs; pause, resume and delete by click', async () => {
  const r = await svc.api('PUT', '/schedules/hourly-sync', {
    cron: '15 * * * *',
    timezone: 'America/New_York',
    job: { exchange: 'amq.direct', routing_key: 'sync', body: 'go' },
  });
  assert.ok(r.status === 201 || r.status === 200, JSON.stringify(r.body));
  const { page } = await openPage(browser, svc);
  await visit(page, svc, '#/schedules');
  const row = page.getByRole('row').filter({ hasText: 'hourly-sync' });
  await row.waitFor();
  assert.match(await row.textContent(), /cron 15 \* \* \* \*/);
  assert.match(await row.textContent(), /America\/New_York/);
  const api = (await svc.api('GET', '/schedules/hourly-sync?count=10')).body;
  await row.getByRole('link', { name: 'hourly-sync' }).click();
  await page.locator('#schedule-state').getByText('active').waitFor();
  const runs = page.getByRole('region', { name: 'Next runs' });
  assert.equal(await runs.locator('tbody tr').count(), 10);
  assert.equal(await runs.locator('tbody tr td').nth(1).textContent(), api.next_runs[0].local);

  await page.getByRole('button', { name: 'Pause' }).click();
  await waitFor('paused', async () => (await svc.api('GET', '/schedules/hourly-sync')).body.paused === true);
  await page.locator('#schedule-state').getByText('paused').waitFor();
  await page.getByRole('button', { name: 'Resume' }).click();
  await waitFor('resumed', async () => (await svc.api('GET', '/schedules/hourly-sync')).body.paused === false);

  await page.getByRole('button', { name: 'Delete…' }).click();
  const dialog = page.getByRole('dialog', { name: 'Delete schedule' });
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  assert.equal(
    (await svc.api('GET', '/schedules/hourly-sync')).status,
    200,
    'not deleted when the confirmation is cancelled',
  );
  await page.getByRole('button', { name: 'Delete…' }).click();
  await dialog.getByRole('button', { name: 'Delete' }).click();
  await waitFor('deleted', async () => (await svc.api('GET', '/schedules/hourly-sync')).status === 404);
  await page.waitForURL(/#\/schedules$/);
});
