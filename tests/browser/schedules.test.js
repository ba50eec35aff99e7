// A schedule made by PUT /schedules appears with its next runs, in its own
// time zone first; its job template and settings in words; pause and
// resume by click take effect in the API, and a paused schedule looks
// paused; delete asks first.
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
  // "2026-12-06 10:15 America/New_York": the schedule's own clock first.
  const [day, clock] = api.next_runs[0].local.split('T');
  const first = await runs.locator('tbody tr td').nth(0).textContent();
  assert.equal(first, `${day} ${clock.slice(0, 5)} America/New_York`);
  assert.match(first, / \d\d:15 America\/New_York$/);
  assert.equal((await runs.locator('thead th').allTextContents())[0], 'In America/New_York');
  // Its settings in words and the job it creates.
  assert.equal(await page.locator('[data-field="misfire_grace_ms"]').textContent(), '1 min');
  assert.equal(await page.locator('[data-field="start_at"]').textContent(), '\u2014');
  assert.equal(await page.locator('#template [data-field="exchange"]').textContent(), 'amq.direct');
  assert.equal(await page.locator('#template [data-field="routing_key"]').textContent(), 'sync');
  assert.equal(await page.locator('#template-headers').textContent(), 'none');
  assert.equal(await page.locator('#template-body').textContent(), 'go');

  await page.getByRole('button', { name: 'Pause' }).click();
  await waitFor('paused', async () => (await svc.api('GET', '/schedules/hourly-sync')).body.paused === true);
  await page.locator('#schedule-state').getByText('paused').waitFor();
  await page.locator('#paused-notice').waitFor();
  assert.equal(await page.locator('#schedule-state .state').getAttribute('class'), 'state sc-paused');
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

test("the list: next run in the schedule's zone first, paused rows marked, headers and body of the template shown", async () => {
  for (const [name, spec] of [
    ['berlin-digest', { cron: '0 8 * * *', timezone: 'Europe/Berlin' }],
    ['tokyo-paused', { cron: '30 7 * * *', timezone: 'Asia/Tokyo', paused: true }],
  ]) {
    const r = await svc.api('PUT', '/schedules/' + name, {
      ...spec,
      misfire_grace_ms: 90000,
      job: {
        exchange: 'amq.topic',
        routing_key: 'digest.' + name,
        headers: { tenant: 'acme' },
        body: JSON.stringify({ digest: name, pad: 'x'.repeat(400) }),
      },
    });
    assert.ok(r.status === 201 || r.status === 200, JSON.stringify(r.body));
  }
  const { page } = await openPage(browser, svc);
  await visit(page, svc, '#/schedules');
  const berlin = page.locator('tr[data-schedule="berlin-digest"]');
  await berlin.waitFor();
  assert.match(await berlin.locator('td.next-run .zoned').textContent(), /^\d{4}-\d{2}-\d{2} 08:00 Europe\/Berlin$/);
  assert.match(await berlin.locator('td.next-run .hint').textContent(), /UTC/);
  const tokyo = page.locator('tr[data-schedule="tokyo-paused"]');
  assert.equal(await tokyo.getAttribute('class'), 'sched-paused');
  assert.equal(await berlin.getAttribute('class'), 'sched-active');
  // Paused does not look like active: another colour and border style.
  const look = (row) =>
    row.locator('.state').evaluate((el) => {
      const c = getComputedStyle(el);
      return [c.color, c.borderStyle, getComputedStyle(el.closest('td')).backgroundColor].join(' ');
    });
  assert.notEqual(await look(tokyo), await look(berlin));
  assert.equal(await tokyo.locator('td.next-run').textContent(), '\u2014', 'no next run while paused');
  await berlin.getByRole('link', { name: 'berlin-digest' }).click();
  await page.locator('#template-headers').waitFor();
  assert.equal(await page.locator('[data-field="misfire_grace_ms"]').textContent(), '1 min 30 s');
  assert.equal(await page.locator('#template-headers dt').textContent(), 'tenant');
  assert.equal(await page.locator('#template-headers dd').textContent(), 'acme');
  const body = await page.locator('#template-body').textContent();
  assert.equal(body.length, 301, 'a preview: 300 characters and an ellipsis');
  assert.ok(body.startsWith('{"digest":"berlin-digest"'));
  await page.getByText(/first 300 of \d+ characters/).waitFor();
});
