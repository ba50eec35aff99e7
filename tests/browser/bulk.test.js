// Bulk actions from the jobs page. Over a filter: only the action that
// applies to its status is offered; the confirmation restates the filter
// field by field and the exact count it acts on (the page's own stops at
// 10,000), with buttons that cannot be confused; progress is reported,
// exactly those jobs end cancelled, and the list and count refresh. Over a
// selection: row checkboxes and a select-all, one request a job, each
// refusal reported.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service, launch, openPage, visit, inMinutes, waitFor } from './harness.js';

let svc, browser;
before(
  async () => {
    svc = await new Service({ args: ['--ui', 'on'] }).start();
    await svc.seed(12000, (i) => ({
      exchange: 'amq.direct',
      routing_key: i < 10000 ? 'bulk.target' : 'bulk.keep',
      deliver_at: inMinutes(60 + (i % 300)),
      body: `b${i}`,
      // Unroutable (no queue is bound): one run now fails at once.
      max_attempts: 1,
    }));
    browser = await launch();
  },
  { timeout: 300000 },
);
after(async () => {
  await browser?.close();
  await svc?.stop();
});

const count = async (q) => (await svc.api('GET', '/jobs/count' + q)).body.count;

// The jobs page at route shows pageCount; its "Cancel all matching" button
// opens the confirmation, which names confirmCount.
async function openBulkCancel(route, pageCount, confirmCount) {
  const { page } = await openPage(browser, svc);
  await visit(page, svc, route);
  await page.locator('#count').getByText(pageCount).waitFor({ timeout: 20000 });
  await page.getByRole('button', { name: 'Cancel all matching pending jobs…' }).click();
  const dialog = page.getByRole('dialog', { name: 'Cancel pending jobs' });
  await dialog.getByText(confirmCount).waitFor();
  return { page, dialog };
}

test('only the actions that apply: pending offers cancel, failed retry, sent none; unfiltered both, not as the main button', async () => {
  const { page } = await openPage(browser, svc);
  const offered = async (route) => {
    await visit(page, svc, route);
    await page.locator('#list table, #list p').first().waitFor();
    return page.locator('#bulk button').evaluateAll((bs) => bs.map((b) => [b.textContent, b.className]));
  };
  assert.deepEqual(await offered('#/jobs?status=pending'), [['Cancel all matching pending jobs…', 'danger']]);
  assert.deepEqual(await offered('#/jobs?status=failed'), [['Retry all matching failed jobs…', '']]);
  assert.deepEqual(await offered('#/jobs?status=sent'), []);
  assert.deepEqual(await offered('#/jobs'), [
    ['Cancel all matching pending jobs…', 'secondary'],
    ['Retry all matching failed jobs…', 'secondary'],
  ]);
  // Below the list, after the filter's own controls.
  const order = await page.evaluate(() => {
    const all = [...document.querySelectorAll('#main button')];
    return [all.indexOf(document.getElementById('filter-toggle')), all.indexOf(document.getElementById('bulk-cancel'))];
  });
  assert.ok(order[0] < order[1], 'the filter comes first');
});

test('past the page count: the page says "more than 10,000", the confirmation counts them all; "Keep them" changes nothing', async () => {
  const { dialog } = await openBulkCancel(
    '#/jobs?status=pending',
    'More than 10,000 matching jobs',
    '12,000 jobs now.',
  );
  assert.deepEqual(await dialog.locator('#confirm-filter li').allTextContents(), ['status is pending']);
  assert.equal(await dialog.locator('#confirm-yes').textContent(), 'Cancel 12,000 jobs');
  assert.equal(await dialog.locator('#confirm-no').textContent(), 'Keep them');
  await dialog.getByRole('button', { name: 'Keep them' }).click();
  await dialog.waitFor({ state: 'hidden' });
  assert.equal(await count('?status=pending'), 12000);
});

test('bulk cancel of 10,000 filtered jobs: the dialog restates the filter, the list and count refresh when done', async () => {
  const { page, dialog } = await openBulkCancel(
    '#/jobs?routing_key=bulk.target&status=pending',
    '10,000 matching jobs',
    '10,000 jobs now.',
  );
  assert.deepEqual(await dialog.locator('#confirm-filter li').allTextContents(), [
    'status is pending',
    'routing key is \u201cbulk.target\u201d',
  ]);
  await dialog.getByRole('button', { name: 'Cancel 10,000 jobs' }).click();
  await page.locator('#bulk-progress[data-state="done"]').waitFor({ timeout: 120000 });
  assert.match(await page.locator('#bulk-progress').textContent(), /10,000 done/);
  assert.equal(await count('?routing_key=bulk.target&status=cancelled'), 10000);
  assert.equal(await count('?routing_key=bulk.target&status=pending'), 0);
  assert.equal(await count('?routing_key=bulk.keep&status=pending'), 2000);
  // The same page, refreshed: no pending job left in it.
  await page.locator('#count').getByText('0 matching jobs', { exact: true }).waitFor({ timeout: 10000 });
  await page.locator('#list').getByText('No job matches.').waitFor();
});

test('a selection: tick rows (or the page), cancel them job by job, refusals reported, the list refreshes', async () => {
  const { page } = await openPage(browser, svc);
  await visit(page, svc, '#/jobs?routing_key=bulk.keep&limit=20');
  const rows = page.locator('#list tbody tr');
  await waitFor('20 rows', async () => (await rows.count()) === 20);
  const ids = await page.locator('#list td.c-id a').allTextContents();
  // One of the three is run behind the page's back and fails (no queue is
  // bound): its DELETE is refused (409).
  const gone = ids[1];
  assert.equal((await svc.api('POST', '/jobs/' + gone + '/run')).status, 200);
  await waitFor('the run to fail', async () => (await svc.job(gone)).status === 'failed');
  for (const id of ids.slice(0, 3)) await page.getByRole('checkbox', { name: 'Select job ' + id }).check();
  await page.locator('#picked').getByText('3 selected').waitFor();
  await page.getByRole('button', { name: 'Cancel 3 selected jobs…' }).click();
  const dialog = page.getByRole('dialog', { name: 'Cancel jobs' });
  await dialog.waitFor();
  assert.deepEqual(await dialog.locator('#confirm-ids li').allTextContents(), ids.slice(0, 3));
  assert.equal(await dialog.locator('#confirm-no').textContent(), 'Keep them');
  await dialog.getByRole('button', { name: 'Cancel 3 jobs' }).click();
  await page.locator('#bulk-progress[data-state="done"]').waitFor({ timeout: 20000 });
  assert.match(await page.locator('#bulk-progress p').textContent(), /2 of 3 done, 1 error/);
  assert.deepEqual(await page.locator('#pick-errors li').evaluateAll((ls) => ls.map((l) => l.dataset.job)), [gone]);
  assert.match(await page.locator('#pick-errors li').textContent(), /cancel/, "the service's message");
  for (const id of [ids[0], ids[2]]) assert.equal((await svc.job(id)).status, 'cancelled');
  assert.equal((await svc.job(gone)).status, 'failed');
  assert.equal((await svc.job(ids[3])).status, 'pending', 'an unticked row is untouched');
  // Refreshed: the rows (the filter has no status) now say what they are.
  for (const [id, st] of [
    [ids[0], 'cancelled'],
    [gone, 'failed'],
    [ids[2], 'cancelled'],
  ])
    await page.locator(`tr[data-job="${id}"] .status`).getByText(st).waitFor({ timeout: 10000 });
  // Select-all ticks every row of the page and offers what applies to each:
  // cancel for the 17 pending ones, retry for the failed one.
  await page.getByRole('checkbox', { name: 'Select every job on this page' }).check();
  await page.locator('#picked').getByText('20 selected').waitFor();
  await page.getByRole('button', { name: 'Cancel 17 selected jobs…' }).waitFor();
  await page.getByRole('button', { name: 'Retry 1 selected job…' }).click();
  const retry = page.getByRole('dialog', { name: 'Retry job' });
  assert.deepEqual(await retry.locator('#confirm-ids li').allTextContents(), [gone]);
  await retry.getByRole('button', { name: 'Keep it' }).click();
  await retry.waitFor({ state: 'hidden' });
  assert.equal((await svc.job(gone)).status, 'failed', 'kept');
  await page.getByRole('button', { name: 'Clear selection' }).click();
  assert.equal(await page.locator('#list input[data-pick]:checked').count(), 0);
});
