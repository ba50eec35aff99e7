// The dashboard at a glance and in an operator's hands: on a phone the jobs
// list is cards (50 jobs in at most 3,000 px, no badge or id broken, every
// card with its due time) and the filter folds behind one button; numbers
// carry thousands separators and words their plural; the Window select
// stays small and the charts' axis labels stay inside the charts; keyboard
// shortcuts go to pages, not while typing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  Service,
  launch,
  openPage,
  visit,
  inMinutes,
  waitFor,
  report,
  store,
  screenshot,
  PHONE,
  DESKTOP,
} from './harness.js';

const PENDING = 1612;
let svc, browser;
before(
  async () => {
    svc = await new Service({ args: ['--ui', 'on', '--stats-interval-ms', '500'] }).start();
    await svc.seed(PENDING - 1, (i) => ({
      exchange: 'amq.direct',
      routing_key: `orders.${i % 7}`,
      deliver_at: inMinutes(60 + (i % 500)),
      body: `o${i}`,
    }));
    await svc.schedule({ exchange: 'amq.direct', routing_key: 'solo.one', deliver_at: inMinutes(30), body: 'solo' });
    await waitFor(
      'three stats samples',
      async () => (await svc.api('GET', '/stats?window=15m')).body.samples.length >= 3,
    );
    browser = await launch();
  },
  { timeout: 120000 },
);
after(async () => {
  await browser?.close();
  await svc?.stop();
});

// Each element's text (the first text under it) as line boxes: 1 = not wrapped.
const lineBoxes = (els) =>
  els.map((el) => {
    const r = document.createRange();
    r.selectNodeContents(el);
    const rects = [...r.getClientRects()].filter((x) => x.width > 0);
    const tops = new Set(rects.map((x) => Math.round(x.top)));
    return { text: el.textContent, lines: tops.size };
  });

test('phone: 50 jobs as cards, no taller than 3,000 px, nothing wider than the screen, no badge or id broken', async () => {
  const { context, page } = await openPage(browser, svc, { viewport: PHONE });
  await visit(page, svc, '#/jobs');
  const rows = page.locator('#list tbody tr');
  await waitFor('50 rows', async () => (await rows.count()) === 50);
  await page.locator('#count').getByText('1,612 matching jobs').waitFor();
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  await screenshot(page, 'jobs-cards-phone');
  report(
    `browser.glance (${store()}): the jobs page at ${PHONE.width}x${PHONE.height} with 50 jobs is ${height} px tall`,
  );
  assert.ok(height <= 3000, `the page is ${height} px tall`);
  assert.ok(overflow <= 1, `the page is ${overflow} px wider than the phone`);
  // A row is a card: its cells are blocks laid out in a box of its own.
  assert.equal(await rows.first().evaluate((tr) => getComputedStyle(tr).display), 'flex');
  const badges = await page.locator('#list .status').evaluateAll(lineBoxes);
  assert.equal(badges.length, 50);
  for (const b of badges) assert.equal(b.lines, 1, `the badge "${b.text}" wraps`);
  const ids = await page.locator('#list td.c-id a').evaluateAll(lineBoxes);
  for (const b of ids) assert.equal(b.lines, 1, `the id ${b.text} wraps`);
  // Every card shows its id, status, route, due time and attempts, on screen.
  const cards = await rows.evaluateAll((trs) =>
    trs.map((tr) =>
      ['c-id', 'c-status', 'c-ex', 'c-rk', 'c-due', 'c-att'].map((c) => {
        const el = c === 'c-due' ? tr.querySelector('td.c-due time') : tr.querySelector('td.' + c);
        const r = el.getBoundingClientRect();
        return {
          c,
          visible: r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth + 0.5,
          text: el.textContent,
        };
      }),
    ),
  );
  for (const card of cards)
    for (const cell of card) assert.ok(cell.visible && cell.text.trim(), `${cell.c} "${cell.text}" is not on screen`);
  await context.close();
});

test('the filter folds behind one "Filter" button, open when a filter is set', async () => {
  for (const viewport of [PHONE, DESKTOP]) {
    const { context, page } = await openPage(browser, svc, { viewport });
    await visit(page, svc, '#/jobs');
    const toggle = page.getByRole('button', { name: 'Filter', exact: true });
    await toggle.waitFor();
    assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
    assert.equal(await page.getByRole('search', { name: 'Filter jobs' }).isVisible(), false);
    await toggle.click();
    assert.equal(await toggle.getAttribute('aria-expanded'), 'true');
    await page.getByLabel('Routing key', { exact: true }).fill('solo.one');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.locator('#count').getByText('1 matching job', { exact: true }).waitFor();
    // Set by the URL, the form is open and says how many fields are set.
    const open = page.getByRole('button', { name: 'Filter (1 set)' });
    assert.equal(await open.getAttribute('aria-expanded'), 'true');
    assert.equal(await page.getByRole('search', { name: 'Filter jobs' }).isVisible(), true);
    assert.equal(await page.getByLabel('Routing key', { exact: true }).inputValue(), 'solo.one');
    await context.close();
  }
});

test('numbers and words: 1,612 on the Overview, "1 matching job", a small Window select, axis labels inside the charts', async () => {
  const { context, page } = await openPage(browser, svc, { viewport: DESKTOP });
  await visit(page, svc, '#/');
  await page.locator('[data-status="pending"]').getByText('1,612', { exact: true }).waitFor();
  const win = await page.locator('#window').boundingBox();
  assert.ok(win.width < 250, `the Window select is ${win.width} px wide`);
  await page.locator('svg.chart text.x-label').first().waitFor();
  const out = await page.locator('svg.chart').evaluateAll((svgs) =>
    svgs.flatMap((svg) => {
      const box = svg.getBoundingClientRect();
      return [...svg.querySelectorAll('text')]
        .map((t) => ({ t: t.textContent, r: t.getBoundingClientRect() }))
        .filter(
          ({ r }) =>
            r.left < box.left - 0.5 ||
            r.right > box.right + 0.5 ||
            r.top < box.top - 0.5 ||
            r.bottom > box.bottom + 0.5,
        )
        .map(({ t }) => t);
    }),
  );
  assert.equal((await page.locator('svg.chart text').count()) >= 12, true, 'three charts, four labels each');
  assert.deepEqual(out, [], 'labels outside their chart');
  await visit(page, svc, '#/jobs?routing_key=solo.one');
  await page.locator('#count').getByText('1 matching job', { exact: true }).waitFor();
  await visit(page, svc, '#/jobs?routing_key=nothing.here');
  await page.locator('#count').getByText('0 matching jobs', { exact: true }).waitFor();
  await context.close();
});

test('keyboard: g j, g s, g o go to pages, / searches, ? lists the keys; not while typing', async () => {
  const { context, page } = await openPage(browser, svc, { viewport: DESKTOP });
  await visit(page, svc, '#/');
  await page.locator('[data-status="pending"]').waitFor();
  await page.keyboard.press('g');
  await page.keyboard.press('j');
  await page.waitForURL(/#\/jobs$/);
  await page.keyboard.press('g');
  await page.keyboard.press('s');
  await page.waitForURL(/#\/schedules$/);
  await page.keyboard.press('g');
  await page.keyboard.press('o');
  await page.waitForURL(/#\/$/);
  // "/" goes to the Jobs page's search with the filter open and focused.
  await page.keyboard.press('/');
  await page.waitForURL(/#\/jobs$/);
  const q = page.getByLabel('Body contains', { exact: true });
  await waitFor('the search focused', () => q.evaluate((el) => el === document.activeElement));
  // Typing in it is typing: "g s" stays in the field.
  await page.keyboard.type('gs/');
  assert.equal(await q.inputValue(), 'gs/');
  assert.match(page.url(), /#\/jobs$/);
  await q.blur();
  await page.keyboard.press('?');
  const keys = page.getByRole('dialog', { name: 'Keyboard shortcuts' });
  await keys.waitFor();
  assert.match(await keys.textContent(), /Schedules/);
  await keys.getByRole('button', { name: 'Close' }).click();
  await keys.waitFor({ state: 'hidden' });
  await context.close();
});
