// A bulk cancel of a filtered set of 10,000 jobs from the jobs page: the
// confirmation shows the exact count (the page's own stops at 10,000),
// progress is reported, exactly those jobs end cancelled and the others
// stay pending.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service, launch, openPage, visit, inMinutes } from './harness.js';

let svc, browser;
before(
  async () => {
    svc = await new Service({ args: ['--ui', 'on'] }).start();
    await svc.seed(12000, (i) => ({
      exchange: 'amq.direct',
      routing_key: i < 10000 ? 'bulk.target' : 'bulk.keep',
      deliver_at: inMinutes(60 + (i % 300)),
      body: `b${i}`,
    }));
    browser = await launch();
  },
  { timeout: 300000 },
);
after(async () => {
  await browser?.close();
  await svc?.stop();
});

// The jobs page at route shows pageCount; its bulk cancel button opens the
// confirmation, which names confirmCount.
async function openBulkCancel(route, pageCount, confirmCount) {
  const { page } = await openPage(browser, svc);
  await visit(page, svc, route);
  await page.locator('#count').getByText(pageCount).waitFor({ timeout: 20000 });
  await page.getByRole('button', { name: 'Cancel all matching…' }).click();
  const dialog = page.getByRole('dialog', { name: 'Cancel jobs' });
  await dialog.getByText(confirmCount).waitFor();
  return { page, dialog };
}

test('past the page count: the page says "more than 10,000", the confirmation counts them all; saying no changes nothing', async () => {
  const { dialog } = await openBulkCancel(
    '#/jobs?status=pending',
    'More than 10,000 matching jobs',
    'Cancel 12,000 matching jobs',
  );
  await dialog.locator('#confirm-no').click();
  await dialog.waitFor({ state: 'hidden' });
  assert.equal((await svc.api('GET', '/jobs/count?status=pending')).body.count, 12000);
});

test('bulk cancel of 10,000 filtered jobs', async () => {
  const { page, dialog } = await openBulkCancel(
    '#/jobs?routing_key=bulk.target&status=pending',
    '10,000 matching jobs',
    'Cancel 10,000 matching jobs',
  );
  await dialog.getByRole('button', { name: 'Cancel jobs' }).click();
  await page.locator('#bulk-progress[data-state="done"]').waitFor({ timeout: 120000 });
  assert.match(await page.locator('#bulk-progress').textContent(), /10000 done/);
  const count = async (q) => (await svc.api('GET', '/jobs/count' + q)).body.count;
  assert.equal(await count('?routing_key=bulk.target&status=cancelled'), 10000);
  assert.equal(await count('?routing_key=bulk.target&status=pending'), 0);
  assert.equal(await count('?routing_key=bulk.keep&status=pending'), 2000);
});
