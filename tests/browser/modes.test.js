// --ui read-only hides every action and the server refuses changes sent by
// the page (403 ui_read_only) while scripts without Origin are unaffected;
// --ui off is 404; with a token the page asks for it (again when wrong) and
// keeps it for the tab only (sessionStorage, "Remember for this tab"): never
// a cookie, the URL or localStorage; "Forget token" makes the next load ask.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service, launch, openPage, visit, inMinutes, TOKEN } from './harness.js';

const started = [];
let browser;
async function service(opts) {
  const s = await new Service(opts).start();
  started.push(s);
  browser ??= await launch();
  return s;
}
after(async () => {
  await browser?.close();
  for (const s of started) await s.stop();
});

test('read-only (the default without a token): no action shown, browser changes refused, curl unaffected', async () => {
  const svc = await service({});
  const cfg = (await svc.api('GET', '/ui/config.json')).body;
  assert.equal(cfg.mode, 'read-only');
  assert.equal(cfg.mode_chosen_by, 'auto');
  const j = await svc.schedule({ exchange: 'amq.direct', routing_key: 'ro', deliver_at: inMinutes(30), body: 'x' });
  const { page } = await openPage(browser, svc);
  await visit(page, svc, '#/jobs/' + j.id);
  await page.locator('#job-status').waitFor();
  await page.getByText('Read-only dashboard: no actions.').waitFor();
  for (const name of ['Cancel…', 'Run now', 'Reschedule', 'Retry']) {
    assert.equal(await page.getByRole('button', { name }).count(), 0, name);
  }
  await visit(page, svc, '#/jobs');
  await page.locator('#list table').waitFor();
  assert.equal(await page.locator('#bulk-cancel').count(), 0);
  // The server refuses too: a change sent from the page itself.
  const answers = await page.evaluate(async (id) => {
    const out = [];
    for (const [m, p, b] of [
      ['DELETE', '/jobs/' + id],
      ['PATCH', '/jobs/' + id, { deliver_at: new Date(Date.now() + 7200000).toISOString() }],
      ['POST', '/schedule', { exchange: 'amq.direct', routing_key: 'x', delay_ms: 60000, body: 'y' }],
      ['POST', '/jobs/' + id + '/run'],
      ['POST', '/jobs/' + id + '/retry'],
      ['POST', '/jobs/bulk', { action: 'cancel', filter: { routing_key: 'ro' } }],
    ]) {
      const r = await fetch(p, {
        method: m,
        headers: { 'Content-Type': 'application/json' },
        body: b ? JSON.stringify(b) : undefined,
      });
      out.push([r.status, (await r.json()).error.code]);
    }
    return out;
  }, j.id);
  assert.deepEqual(answers, Array(6).fill([403, 'ui_read_only']));
  const still = await svc.job(j.id);
  assert.equal(still.status, 'pending', 'nothing changed');
  assert.equal(still.deliver_at, j.deliver_at, 'not run now');
  // A script (no Origin, no Sec-Fetch-Site) is unaffected.
  const del = await svc.api('DELETE', '/jobs/' + j.id);
  assert.equal(del.status, 200, JSON.stringify(del.body));
  assert.equal((await svc.job(j.id)).status, 'cancelled');
  // And a change from a page of another origin is refused in every mode.
  const cross = await svc.api('DELETE', '/jobs/' + j.id, undefined, {
    'Sec-Fetch-Site': 'cross-site',
    Origin: 'http://evil.example',
  });
  assert.equal(cross.status, 403);
  assert.equal(cross.body.error.code, 'cross_origin');
});

test('off: /ui/ is 404 and the API still answers', async () => {
  const svc = await service({ args: ['--ui', 'off'] });
  assert.equal((await svc.api('GET', '/ui/')).status, 404);
  assert.equal((await svc.api('GET', '/ui/config.json')).status, 404);
  assert.equal((await svc.api('GET', '/jobs')).status, 200);
});

test('the token prompt: a wrong token asks again; the right one is kept for the tab only, and forgotten on request', async () => {
  const svc = await service({ token: TOKEN });
  assert.equal((await svc.api('GET', '/ui/config.json', undefined, { Authorization: 'Bearer nope' })).body.mode, 'on');
  const { context, page } = await openPage(browser, svc);
  await page.goto(svc.url + '/ui/#/about');
  const dialog = page.getByRole('dialog', { name: 'API token' });
  await dialog.waitFor();
  assert.equal(await dialog.getByLabel(/Remember for this tab/).isChecked(), true, 'on by default');
  await dialog.getByLabel('Bearer token').fill('wrong-token-wrong-token');
  await dialog.getByRole('button', { name: 'Use token' }).click();
  await page.getByText('That token was refused').waitFor();
  await dialog.getByLabel('Bearer token').fill(TOKEN);
  await dialog.getByRole('button', { name: 'Use token' }).click();
  await page.waitForSelector('body[data-ready="true"]');
  await page.locator('[data-field="store"]').waitFor();
  assert.match(await page.locator('[data-field="API token"]').textContent(), /required/);
  const kept = () =>
    page.evaluate(() => ({
      cookie: document.cookie,
      local: localStorage.length,
      session: Object.keys(sessionStorage),
      url: location.href,
    }));
  const k = await kept();
  assert.deepEqual({ ...k, url: undefined }, { cookie: '', local: 0, session: ['rmqs-api-token'], url: undefined });
  assert.ok(!k.url.includes(TOKEN));
  assert.deepEqual(await context.cookies(), []);
  assert.ok(!(await page.content()).includes(TOKEN), 'not in the DOM either');
  // A reload of the tab keeps working without asking.
  await page.reload();
  await page.waitForSelector('body[data-ready="true"]');
  await page.locator('[data-field="store"]').waitFor();
  assert.equal(await dialog.isVisible(), false);
  // So does a page this tab opens (it gets a copy of the tab's session).
  const [opened] = await Promise.all([
    context.waitForEvent('page'),
    page.evaluate(() => window.open(location.origin + '/ui/#/jobs')),
  ]);
  await opened.waitForSelector('body[data-ready="true"]');
  await opened.locator('#list').getByText('No job matches.').waitFor();
  assert.equal(await opened.getByRole('dialog', { name: 'API token' }).isVisible(), false);
  await opened.close();
  // Another tab of its own (no opener) has its own session: it asks.
  const fresh = await context.newPage();
  await fresh.goto(svc.url + '/ui/#/about');
  await fresh.getByRole('dialog', { name: 'API token' }).waitFor();
  await fresh.close();
  // "Forget token": the next load asks again; nothing is left anywhere.
  await page.getByRole('button', { name: 'Forget token' }).click();
  await dialog.waitFor();
  const after = await kept();
  assert.deepEqual({ ...after, url: undefined }, { cookie: '', local: 0, session: [], url: undefined });
  assert.deepEqual(await context.cookies(), []);
  // Not remembered: the tab keeps nothing, and a reload asks again.
  await dialog.getByLabel(/Remember for this tab/).uncheck();
  await dialog.getByLabel('Bearer token').fill(TOKEN);
  await dialog.getByRole('button', { name: 'Use token' }).click();
  await page.waitForSelector('body[data-ready="true"]');
  assert.deepEqual((await kept()).session, []);
  await page.reload();
  await dialog.waitFor();
});

test('a browser opening / with a token set lands on the dashboard, which asks for the token', async () => {
  const svc = await service({ token: TOKEN });
  // A script without the token still gets the API's answer at /.
  assert.equal((await fetch(svc.url + '/')).status, 401);
  const { page } = await openPage(browser, svc);
  const resp = await page.goto(svc.url + '/');
  assert.equal(new URL(page.url()).pathname, '/ui/', 'redirected to /ui/');
  assert.equal(resp.status(), 200);
  await page.getByRole('dialog', { name: 'API token' }).waitFor();
});
