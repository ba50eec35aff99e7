// Filter and search find the right jobs among 100,000 (seeded through POST
// /schedule/batch): routing key, exchange, status, id prefix, header, body
// substring; the count agrees and the filter is kept in the URL.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service, launch, openPage, visit, inMinutes } from './harness.js';

const N = 100000;
let svc, browser, needle;
before(
  async () => {
    // This file proves what the filters find and what the page shows; the
    // search budget (--search-timeout-ms, 2 s by default) is
    // integration.search_budget's. Under ASan, on PostgreSQL, beside the other
    // lane's test, counting by three filters among 100,000 can take longer
    // than 2 s, and the page then rightly says "More than N": a budget of
    // 30 s keeps this file about the filters.
    svc = await new Service({ args: ['--ui', 'on', '--search-timeout-ms', '30000'] }).start();
    await svc.seed(N, (i) => ({
      exchange: i % 10 === 0 ? 'amq.topic' : 'amq.direct',
      routing_key: `r.${i % 100}`,
      deliver_at: inMinutes(60 + (i % 600)),
      headers: { tenant: `t${i % 50}` },
      body: i === 4242 ? 'the unique needle-4242 text' : `order number ${i}`,
    }));
    needle = (await svc.api('GET', '/jobs?q=needle-4242')).body.jobs[0];
    browser = await launch();
  },
  { timeout: 300000 },
);
after(async () => {
  await browser?.close();
  await svc?.stop();
});

// Until a click's hash change renders the page anew, the count and the list
// of the page before are still there, and that count says "matching jobs"
// too (CI once read it, the unfiltered page's, as the search's answer):
// wait for them to go first.
async function clickAndWaitForRender(page, locator) {
  const before = await page.locator('#count').elementHandle();
  await locator.click();
  await page.waitForFunction((el) => !el.isConnected, before);
}

async function search(page, fields) {
  await visit(page, svc, '#/jobs');
  await page.getByRole('button', { name: 'Filter', exact: true }).click();
  for (const [label, value] of Object.entries(fields)) {
    const f = page.getByLabel(label, { exact: true });
    if ((await f.evaluate((e) => e.tagName)) === 'SELECT') await f.selectOption(value);
    else await f.fill(value);
  }
  await clickAndWaitForRender(page, page.getByRole('button', { name: 'Search' }));
  await page
    .locator('#count')
    .getByText(/matching jobs?$/)
    .waitFor({ timeout: 20000 });
  await page.locator('#list').locator('table, p').first().waitFor();
  return {
    count: await page.locator('#count').textContent(),
    ids: await page.locator('#list tbody a').allTextContents(),
  };
}

test('body substring finds the one job among 100,000', async () => {
  assert.ok(needle, 'GET /jobs?q= found it');
  const { page } = await openPage(browser, svc);
  const r = await search(page, { 'Body contains': 'needle-4242' });
  assert.equal(r.count, '1 matching job');
  assert.deepEqual(r.ids, [needle.id]);
  assert.match(page.url(), /q=needle-4242/, 'the filter is in the URL');
  // The URL alone brings the same view (shared link).
  const { page: other } = await openPage(browser, svc);
  await visit(other, svc, '#/jobs?q=needle-4242');
  await other.locator('#list tbody a').first().waitFor();
  assert.deepEqual(await other.locator('#list tbody a').allTextContents(), [needle.id]);
});

test('routing key + exchange + header narrow it to the right count', async () => {
  // i % 100 == 20 (so i % 10 == 0: amq.topic) and i % 50 == 20: 1,000 jobs.
  const { page } = await openPage(browser, svc);
  const r = await search(page, { Exchange: 'amq.topic', 'Routing key': 'r.20', Header: 'tenant:t20' });
  assert.equal(r.count, '1,000 matching jobs');
  assert.equal(r.ids.length, 50);
  for (const id of r.ids.slice(0, 5)) {
    const j = await svc.job(id);
    assert.equal(j.routing_key, 'r.20');
    assert.equal(j.exchange, 'amq.topic');
    assert.equal(j.headers.tenant, 't20');
  }
  // The next page by cursor: other jobs, same filter.
  await clickAndWaitForRender(page, page.locator('#next-page'));
  await page.locator('#list tbody a').first().waitFor();
  const second = await page.locator('#list tbody a').allTextContents();
  assert.equal(second.length, 50);
  assert.equal(second.filter((id) => r.ids.includes(id)).length, 0);
});

test('id prefix finds the job', async () => {
  // Ids are UUIDv7: the first 12 hex digits are the creation millisecond,
  // which a whole batch of 1,000 shares. 23 characters (20 hex digits, as
  // pasted, with dashes) add 26 random bits: the needle alone, in practice;
  // the page's count is the API's either way.
  const prefix = needle.id.slice(0, 23);
  const api = (await svc.api('GET', '/jobs/count?id_prefix=' + prefix)).body;
  assert.ok(api.count >= 1 && api.count <= 50 && !api.capped, JSON.stringify(api));
  const { page } = await openPage(browser, svc);
  const r = await search(page, { 'Id prefix': prefix });
  assert.equal(r.count, api.count.toLocaleString('en') + (api.count === 1 ? ' matching job' : ' matching jobs'));
  assert.equal(r.ids.length, api.count);
  assert.ok(r.ids.includes(needle.id));
  for (const id of r.ids) assert.ok(id.startsWith(prefix), id);
});
