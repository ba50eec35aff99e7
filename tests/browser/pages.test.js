// Every page loads with its CSP enforced and not one console message, makes
// no request to another origin, carries the security headers, passes
// axe-core (no serious or critical finding) on a desktop and a phone
// viewport in the light scheme and on the desktop in the dark one, and is
// kept as a screenshot.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  Service,
  launch,
  openPage,
  visit,
  axe,
  seriousOrCritical,
  report,
  screenshot,
  store,
  inMinutes,
  queue,
  waitFor,
  PHONE,
  DESKTOP,
} from './harness.js';

let svc, browser, jobId, sink;
const ROUTES = () => [
  ['overview', '#/', '[data-status="pending"]'],
  ['jobs', '#/jobs', '#list table'],
  ['job', '#/jobs/' + jobId, '#body'],
  ['schedules', '#/schedules', '#main table'],
  ['schedule', '#/schedules/nightly-report', '#schedule-state'],
  ['limits', '#/limits', '#limits table'],
  ['limit', '#/limits/orders-per-tenant', '[data-field="rate_per_s"]'],
  ['about', '#/about', '[data-field="version"]'],
];

before(async () => {
  // Samples every 500 ms, so the Overview's charts have real data to draw.
  svc = await new Service({ args: ['--ui', 'on', '--stats-interval-ms', '500'] }).start();
  const j = await svc.schedule({
    exchange: 'amq.direct',
    routing_key: 'reports.daily',
    deliver_at: inMinutes(30),
    body: JSON.stringify({ report: 'daily', pages: [1, 2, 3] }),
    headers: { tenant: 'acme' },
    properties: { message_id: 'm-1', content_type: 'application/json' },
  });
  jobId = j.id;
  await svc.seed(40, (i) => ({
    exchange: 'amq.direct',
    routing_key: `orders.${i % 4}`,
    deliver_at: inMinutes(60 + i),
    body: `order ${i}`,
  }));
  const r = await svc.api('PUT', '/schedules/nightly-report', {
    cron: '0 2 * * *',
    timezone: 'Europe/Berlin',
    job: { exchange: 'amq.direct', routing_key: 'reports.nightly', body: 'run' },
  });
  assert.ok(r.status === 201 || r.status === 200, JSON.stringify(r.body));
  for (const [name, spec] of [
    [
      'orders-per-tenant',
      { match: { exchange: 'amq.direct', routing_key: 'orders.#' }, rate_per_s: 500, burst: 50, key: 'header:tenant' },
    ],
    [
      'reports-queue',
      { match: { routing_key: 'reports.*' }, hold_when_queue_ready_over: { queue: 'reports', messages: 1000 } },
    ],
  ]) {
    const l = await svc.api('PUT', '/limits/' + name, spec);
    assert.equal(l.status, 201, JSON.stringify(l.body));
  }
  // Traffic over several stats intervals: jobs sent to a real queue (spread
  // over each interval), one failed now and then (no queue: NO_ROUTE, 1
  // attempt), one cancelled; each round waits for the sample that holds it.
  sink = await queue();
  const samples = async () => (await svc.api('GET', '/stats?window=15m')).body.samples;
  for (let k = 0; k < 6; k++) {
    const seen = (await samples()).length;
    await svc.seed(4 + 3 * (k % 3), (i) => ({
      exchange: '',
      routing_key: sink.name,
      delay_ms: i * 40,
      body: `tick ${k}.${i}`,
    }));
    if (k % 2 === 1) {
      await svc.schedule({
        exchange: '',
        routing_key: `rmqs-nowhere-${process.pid}`,
        delay_ms: 0,
        max_attempts: 1,
        body: 'lost',
      });
    }
    const c = await svc.schedule({
      exchange: 'amq.direct',
      routing_key: 'orders.cancelled',
      deliver_at: inMinutes(90),
      body: 'c',
    });
    assert.equal((await svc.api('DELETE', '/jobs/' + c.id)).status, 200);
    await waitFor('the next stats sample', async () => (await samples()).length > seen + 1, 15000);
  }
  await waitFor(
    'sent and failed jobs in the samples',
    async () => {
      const s = await samples();
      return s.some((x) => x.sent > 0) && s.some((x) => x.failed > 0) && s.some((x) => x.late_p50_ms != null);
    },
    15000,
  );
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await sink?.close();
  await svc?.stop();
});

test('each page loads with the CSP enforced, no console message and no other origin', async () => {
  const problems = []; // every page is visited (and kept as a screenshot) before the verdict
  for (const [name, route, ready] of ROUTES()) {
    const { context, page, rec } = await openPage(browser, svc, { viewport: DESKTOP });
    await visit(page, svc, route);
    await page.waitForSelector(ready, { timeout: 15000 });
    await page.waitForLoadState('networkidle');
    await screenshot(page, name);
    const check = (ok, what) => {
      if (!ok) problems.push(`${name}: ${what}`);
    };
    check(rec.console.length === 0, 'console: ' + rec.console.join(' | '));
    check(rec.errors.length === 0, 'uncaught errors: ' + rec.errors.join(' | '));
    check(rec.dialogs.length === 0, 'dialogs: ' + rec.dialogs.join(' | '));
    const foreign = rec.requests.filter((u) => !u.startsWith(svc.url + '/'));
    check(foreign.length === 0, 'requests to another origin: ' + foreign.join(' '));
    check(rec.requests.length > 3, "the page's requests were not recorded");
    const h = await rec.documents[0].allHeaders();
    const csp = h['content-security-policy'] || '';
    check(
      /default-src 'none'/.test(csp) && /script-src 'self'(;|$)/.test(csp) && /frame-ancestors 'none'/.test(csp),
      'CSP: ' + csp,
    );
    check(h['x-content-type-options'] === 'nosniff', 'nosniff');
    check(h['referrer-policy'] === 'no-referrer', 'referrer-policy');
    check(h['x-frame-options'] === 'DENY', 'x-frame-options');
    await context.close();
  }
  assert.deepEqual(problems, []);
});

test('the CSP blocks what the page does not need (proved by an inline script it refuses)', async () => {
  const { context, page, rec } = await openPage(browser, svc);
  await visit(page, svc, '#/about');
  // The page itself never does this: it shows that the policy is enforced.
  await page.evaluate(() => {
    const s = document.createElement('script');
    s.textContent = 'window.__inline_ran = true';
    document.body.appendChild(s);
  });
  assert.equal(await page.evaluate(() => window.__inline_ran), undefined);
  await page.waitForTimeout(200);
  assert.ok(
    rec.console.some((m) => /Content Security Policy/.test(m)),
    rec.console.join('\n'),
  );
  await context.close();
});

test('axe-core: no serious or critical finding on any page, desktop and phone', async () => {
  const seen = { pages: 0, findings: 0, serious: 0 };
  for (const viewport of [DESKTOP, PHONE]) {
    for (const [name, route, ready] of ROUTES()) {
      const { context, page } = await openPage(browser, svc, { viewport });
      await visit(page, svc, route);
      await page.waitForSelector(ready, { timeout: 15000 });
      const found = await axe(page);
      // Every finding is printed (moderate and minor ones too); serious or
      // critical ones fail.
      console.log(`axe: ${name} at ${viewport.width}px: ${found.length ? JSON.stringify(found) : 'no violation'}`);
      seen.pages += 1;
      seen.findings += found.length;
      seen.serious += seriousOrCritical(found).length;
      assert.deepEqual(seriousOrCritical(found), [], `${name} at ${viewport.width}px`);
      if (viewport === PHONE) {
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert.ok(overflow <= 1, `${name}: the page is ${overflow}px wider than a phone`);
        await screenshot(page, name + '-phone');
      }
      await context.close();
    }
  }
  report(
    `browser.pages (${store()}): axe-core on ${seen.pages} page views (${ROUTES().length} pages at ` +
      `${DESKTOP.width} and ${PHONE.width} px): ${seen.findings} findings of any impact, ${seen.serious} serious or critical`,
  );
});

test('dark scheme: the page follows the system setting, and axe-core finds nothing serious on any page', async () => {
  const seen = { pages: 0, findings: 0, serious: 0 };
  // The desktop only: the scheme changes colours (custom properties the
  // phone layout shares), not layout, and axe on 16 more views made this
  // file take 200 s of CI's 90 minutes (the phone's layout is the test
  // above's, in the light scheme).
  for (const viewport of [DESKTOP]) {
    for (const [name, route, ready] of ROUTES()) {
      const { context, page } = await openPage(browser, svc, { viewport, colorScheme: 'dark' });
      await visit(page, svc, route);
      await page.waitForSelector(ready, { timeout: 15000 });
      const bg = await page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
      assert.equal(bg, 'rgb(21, 25, 30)', `${name}: the dark background`);
      const found = await axe(page);
      console.log(
        `axe (dark): ${name} at ${viewport.width}px: ${found.length ? JSON.stringify(found) : 'no violation'}`,
      );
      seen.pages += 1;
      seen.findings += found.length;
      seen.serious += seriousOrCritical(found).length;
      assert.deepEqual(seriousOrCritical(found), [], `${name} at ${viewport.width}px, dark`);
      await screenshot(page, name + '-dark');
      await context.close();
    }
  }
  report(
    `browser.pages (${store()}): axe-core, dark scheme, on ${seen.pages} page views: ` +
      `${seen.findings} findings of any impact, ${seen.serious} serious or critical`,
  );
});

test('the files: content types, ETag revalidation, no token needed, /ui/config.json keeps secrets', async () => {
  for (const [p, type] of [
    ['/ui/', /^text\/html/],
    ['/ui/app.js', /^text\/javascript/],
    ['/ui/style.css', /^text\/css/],
  ]) {
    const r = await svc.api('GET', p);
    assert.equal(r.status, 200, p);
    assert.match(r.headers.get('content-type'), type);
    const etag = r.headers.get('etag');
    assert.ok(etag);
    const again = await fetch(svc.url + p, { headers: { 'If-None-Match': etag } });
    assert.equal(again.status, 304, p);
  }
  const c = (await svc.api('GET', '/ui/config.json')).body;
  assert.equal(c.mode, 'on');
  assert.equal(c.token_required, false);
  assert.equal(c.store.kind, process.env.RMQS_TEST_STORE === 'postgres' ? 'postgres' : 'sqlite');
  const text = JSON.stringify(c);
  assert.doesNotMatch(text, /guest@/, 'the broker password is replaced');
  for (const u of c.broker.urls) assert.match(u, /:\*\*\*@/);
  if (process.env.RMQS_TEST_PG_PASSWORD) assert.ok(!text.includes(process.env.RMQS_TEST_PG_PASSWORD));
  const missing = await svc.api('GET', '/ui/nope.js');
  assert.equal(missing.status, 404);
  assert.match(missing.headers.get('content-security-policy'), /default-src 'none'/);
});
