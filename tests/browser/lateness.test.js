// The Overview's lateness cards say "no sends" once the latest stats
// interval had none, never an earlier interval's value: during a broker
// outage a stale "0.5 ms" looked healthy (issue 25).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service, launch, openPage, visit, queue, waitFor } from './harness.js';

let svc, browser, sink;

before(async () => {
  svc = await new Service({ args: ['--ui', 'on', '--stats-interval-ms', '500'] }).start();
  sink = await queue();
  for (let i = 0; i < 3; i++) await svc.schedule({ exchange: '', routing_key: sink.name, delay_ms: 0, body: `s${i}` });
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await sink?.close();
  await svc?.stop();
});

const samples = async () => (await svc.api('GET', '/stats?window=120')).body.samples;
const card = (page, label) => page.locator('li.card', { hasText: label }).locator('.value');

test('the lateness cards say "no sends" after intervals without a send, not the last value', async () => {
  // sends happened (an interval with a lateness), then three intervals without one
  await waitFor(
    'a lateness sample followed by three without sends',
    async () => {
      const s = await samples();
      const last = s.slice(-3);
      return (
        s.some((x) => x.late_p50_ms != null) &&
        last.length === 3 &&
        last.every((x) => x.sent === 0 && x.late_p50_ms == null)
      );
    },
    20000,
  );
  const { context, page } = await openPage(browser, svc);
  await visit(page, svc, '#/');
  for (const label of ['late p50', 'late p90', 'late p99']) {
    await card(page, label).waitFor({ timeout: 15000 });
    assert.equal((await card(page, label).textContent()).trim(), 'no sends', label);
  }
  await context.close();
});
