// --ui read-only hides every action and the server refuses changes sent by
// the page (403 ui_read_only) while scripts without Origin are unaffected;
// --ui off is 404; with a token the page asks for it (again when wrong) and
// keeps it in no cookie, URL or storage.
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

test('the token prompt: a wrong token asks again, the right one works, and it is stored nowhere', async () => {
  const svc = await service({ token: TOKEN });
  assert.equal((await svc.api('GET', '/ui/config.json', undefined, { Authorization: 'Bearer nope' })).body.mode, 'on');
  const { context, page } = await openPage(browser, svc);
  await page.goto(svc.url + '/ui/#/about');
  const dialog = page.getByRole('dialog', { name: 'API token' });
  await dialog.waitFor();
  await dialog.getByLabel('Bearer token').fill('wrong-token-wrong-token');
  await dialog.getByRole('button', { name: 'Use token' }).click();
  await page.getByText('That token was refused').waitFor();
  await dialog.getByLabel('Bearer token').fill(TOKEN);
  await dialog.getByRole('button', { name: 'Use token' }).click();
  await page.waitForSelector('body[data-ready="true"]');
  await page.locator('[data-field="store"]').waitFor();
  assert.match(await page.locator('[data-field="API token"]').textContent(), /required/);
  const kept = await page.evaluate(() => ({
    cookie: document.cookie,
    local: localStorage.length,
    session: sessionStorage.length,
    url: location.href,
  }));
  assert.deepEqual({ ...kept, url: undefined }, { cookie: '', local: 0, session: 0, url: undefined });
  assert.ok(!kept.url.includes(TOKEN));
  assert.deepEqual(await context.cookies(), []);
  assert.ok(!(await page.content()).includes(TOKEN), 'not in the DOM either');
  // A reload forgets it: asked again.
  await page.reload();
  await dialog.waitFor();
});
