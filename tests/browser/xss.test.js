// A job whose body, headers, routing key and message id hold <script>,
// <img src=x onerror=...> and javascript: is shown as inert text: the
// strings appear as they are, no element came of them, no dialog opened
// and no injected script ran.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service, launch, openPage, visit, inMinutes } from './harness.js';

const SCRIPT = '<script>window.__pwned=1;alert(1)</script>';
const IMG = '<img src=x onerror="window.__pwned=2;alert(2)">';
const JS = 'javascript:window.__pwned=3;alert(3)';
let svc, browser, id;
before(async () => {
  svc = await new Service({ args: ['--ui', 'on'] }).start();
  browser = await launch();
  id = (
    await svc.schedule({
      exchange: 'amq.direct',
      routing_key: SCRIPT,
      deliver_at: inMinutes(30),
      body: `${SCRIPT} ${IMG} ${JS}`,
      headers: { [IMG]: JS, 'x-link': JS },
      properties: { message_id: IMG, type: SCRIPT },
    })
  ).id;
});
after(async () => {
  await browser?.close();
  await svc?.stop();
});

for (const [name, route] of [
  ['list', '#/jobs'],
  ['detail', () => '#/jobs/' + id],
]) {
  test(`hostile strings are inert text in the ${name}`, async () => {
    const { page, rec } = await openPage(browser, svc);
    await visit(page, svc, typeof route === 'function' ? route() : route);
    await page.getByText(SCRIPT).first().waitFor();
    if (name === 'detail') {
      assert.equal(await page.locator('#body').textContent(), `${SCRIPT} ${IMG} ${JS}`);
      await page.getByText(IMG).first().waitFor();
      await page.getByText(JS).first().waitFor();
    }
    await page.waitForTimeout(500);
    assert.equal(await page.evaluate(() => window.__pwned), undefined, 'no injected script ran');
    assert.deepEqual(rec.dialogs, [], 'no dialog opened');
    assert.equal(await page.locator('main img').count(), 0, 'no <img> came of the data');
    assert.equal(await page.locator('main script').count(), 0, 'no <script> came of the data');
    const hrefs = await page.locator('a').evaluateAll((as) => as.map((a) => a.getAttribute('href')));
    assert.ok(
      hrefs.every((h) => h.startsWith('#/')),
      hrefs.join(' '),
    );
    assert.deepEqual(rec.errors, []);
    assert.deepEqual(
      rec.requests.filter((u) => !u.startsWith(svc.url + '/')),
      [],
      'no request for x',
    );
    assert.ok(!rec.requests.some((u) => u.endsWith('/x')), 'the img src was never fetched');
  });
}
