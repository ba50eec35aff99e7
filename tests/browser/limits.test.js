// The Limits page: limits made through the API are listed with what they
// match and their live figures; in "on" mode a limit is created, changed
// (PATCH of the changed member only) and deleted through the form, and a
// refused value is shown on the field the server names; read-only shows no
// control; a limit that holds jobs back links to them, and the jobs say so
// (the badge in the list, held_by and held_ms on the job's page); a hostile
// routing key pattern is inert text.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service, launch, openPage, visit, queue, waitFor, axe, seriousOrCritical } from './harness.js';

let svc, browser;
const started = [];
before(async () => {
  svc = await new Service({ args: ['--ui', 'on'] }).start();
  started.push(svc);
  browser = await launch();
});
after(async () => {
  await browser?.close();
  for (const s of started) await s.stop();
});

async function putLimit(s, name, spec) {
  const r = await s.api('PUT', '/limits/' + name, spec);
  assert.ok(r.status === 201 || r.status === 200, JSON.stringify(r.body));
  return r.body;
}

const limitRow = (page, name) => page.locator(`tr[data-limit="${name}"]`);

test('limits made through the API are listed with their members and live figures', async () => {
  try {
    await listed();
  } finally {
    for (const name of ['orders-per-tenant', 'reports-queue']) await svc.api('DELETE', '/limits/' + name);
  }
});

async function listed() {
  await putLimit(svc, 'orders-per-tenant', {
    match: { exchange: 'orders*', routing_key: 'eu.#' },
    rate_per_s: 500,
    burst: 50,
    key: 'header:tenant',
    max_buckets: 2000,
  });
  await putLimit(svc, 'reports-queue', {
    match: { exchange: 'reports' },
    hold_when_queue_ready_over: { queue: 'reports', messages: 1000 },
  });
  // The dispatcher reads the limits at its next claim: a job due now that
  // neither matches makes one, and the figures appear.
  const q = await queue();
  await svc.schedule({ exchange: '', routing_key: q.name, delay_ms: 0, body: 'tick' });
  await waitFor('the dispatcher to read the limits', async () =>
    (await svc.api('GET', '/limits')).body.limits.every((l) => l.stats !== null),
  );
  await q.close();
  const { page, rec } = await openPage(browser, svc);
  await visit(page, svc, '#/limits');
  const tenant = limitRow(page, 'orders-per-tenant');
  await tenant.locator('td[data-stat="buckets"]').getByText('0', { exact: true }).waitFor();
  const cells = await tenant.locator('td').allTextContents();
  assert.deepEqual(cells.slice(0, 5), [
    'orders-per-tenant',
    'exchange orders*routing key eu.#',
    '500/s, burst 50',
    'header:tenant (at most 2,000 buckets)',
    '—',
  ]);
  assert.deepEqual(cells.slice(5), ['0/s', '0', '—', '0', '0']);
  assert.equal(
    await tenant.locator('td[data-stat="held"] a').getAttribute('href'),
    '#/jobs?held_by=orders-per-tenant&status=pending',
  );
  const hold = await limitRow(page, 'reports-queue').locator('td').allTextContents();
  assert.deepEqual(hold.slice(1, 5), ['exchange reportsrouting key any', '—', '—', 'queue reports over 1,000 ready']);
  await limitRow(page, 'reports-queue').getByRole('link', { name: 'reports-queue', exact: true }).click();
  await page.waitForURL(/#\/limits\/reports-queue$/);
  await page.locator('[data-field="hold_when_queue_ready_over"]').getByText('reports').first().waitFor();
  assert.equal(await page.locator('[data-field="match.routing_key"]').textContent(), 'any');
  await page.locator('[data-field="held now"]').waitFor();
  assert.deepEqual(rec.errors, []);
  assert.deepEqual(rec.console, []);
}

test('on mode: create through the form, a refused value on its field, change the rate, delete', async () => {
  const { page, rec } = await openPage(browser, svc);
  await visit(page, svc, '#/limits');
  await page.locator('#no-limits').waitFor();
  await page.getByRole('button', { name: 'New limit…' }).click();
  const form = page.getByRole('form', { name: 'New limit' });
  await form.getByLabel('Name', { exact: true }).fill('ui-made');
  await form.getByLabel('Exchange', { exact: true }).fill('amq.direct');
  await form.getByLabel('Routing key', { exact: true }).fill('ui.#');
  await form.getByLabel('Jobs a second', { exact: true }).fill('0');
  assert.match(await page.locator('#limit-preview').textContent(), /^PUT \/limits\/ui-made\n/);
  await form.getByRole('button', { name: 'Create limit' }).click();
  // The server's word, on the field it names.
  const rate = form.getByLabel('Jobs a second', { exact: true });
  await page.locator('#limit-rate[aria-invalid="true"]').waitFor();
  assert.match(await page.locator('#limit-rate-error').textContent(), /^rate_per_s: /);
  assert.match(await form.getByRole('alert').textContent(), /rate_per_s/);
  assert.equal(await page.evaluate(() => document.activeElement.id), 'limit-rate');
  assert.equal(await page.locator('[aria-invalid="true"]').count(), 1, 'only that field is marked');
  assert.equal((await svc.api('GET', '/limits/ui-made')).status, 404, 'nothing was created');
  const found = seriousOrCritical(await axe(page));
  assert.deepEqual(found, [], 'the form with an error');

  await rate.fill('50');
  await form.getByLabel('Burst', { exact: true }).fill('5');
  await form.getByRole('button', { name: 'Create limit' }).click();
  const row = limitRow(page, 'ui-made');
  await row.waitFor();
  assert.equal(await page.locator('#new-limit').isHidden(), true, 'the form closes');
  const made = (await svc.api('GET', '/limits/ui-made')).body;
  assert.deepEqual(
    { match: made.match, rate_per_s: made.rate_per_s, burst: made.burst, generation: made.generation },
    { match: { exchange: 'amq.direct', routing_key: 'ui.#' }, rate_per_s: 50, burst: 5, generation: 1 },
  );
  assert.equal(await row.locator('td').nth(2).textContent(), '50/s, burst 5');

  // Change the rate on its page: a PATCH of that member alone.
  await row.getByRole('link', { name: 'ui-made', exact: true }).click();
  const edit = page.getByRole('form', { name: 'Change the limit' });
  await edit.getByLabel('Jobs a second', { exact: true }).fill('75');
  const sent = page.waitForRequest((r) => r.method() === 'PATCH' && r.url().endsWith('/limits/ui-made'));
  await edit.getByRole('button', { name: 'Save changes' }).click();
  assert.deepEqual((await sent).postDataJSON(), { rate_per_s: 75 });
  await waitFor('the new rate', async () => (await svc.api('GET', '/limits/ui-made')).body.rate_per_s === 75);
  await page.locator('[data-field="rate_per_s"]').getByText('75 a second').waitFor();
  assert.equal((await svc.api('GET', '/limits/ui-made')).body.generation, 2);

  // A nested member the server refuses: its own field is marked.
  await edit.getByLabel('Hold while queue', { exact: true }).fill('ui-q');
  await edit.getByLabel('has more ready than', { exact: true }).fill('-1');
  await edit.getByRole('button', { name: 'Save changes' }).click();
  await page.locator('#limit-messages[aria-invalid="true"]').waitFor();
  assert.match(await page.locator('#limit-messages-error').textContent(), /^hold_when_queue_ready_over\.messages: /);
  await edit.getByLabel('has more ready than', { exact: true }).fill('100');
  await edit.getByRole('button', { name: 'Save changes' }).click();
  await waitFor(
    'the queue hold',
    async () => (await svc.api('GET', '/limits/ui-made')).body.hold_when_queue_ready_over?.messages === 100,
  );
  assert.equal(await page.locator('[aria-invalid="true"]').count(), 0, 'the mark goes once accepted');

  // Delete: asked first, with the name; Cancel keeps it.
  await page.getByRole('button', { name: 'Delete…' }).click();
  const dialog = page.getByRole('dialog', { name: 'Delete limit' });
  assert.match(await dialog.textContent(), /Delete the limit ui-made\?/);
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  assert.equal((await svc.api('GET', '/limits/ui-made')).status, 200, 'kept when the confirmation is cancelled');
  await page.getByRole('button', { name: 'Delete…' }).click();
  await dialog.getByRole('button', { name: 'Delete' }).click();
  await waitFor('deleted', async () => (await svc.api('GET', '/limits/ui-made')).status === 404);
  await page.waitForURL(/#\/limits$/);
  await page.locator('#no-limits').waitFor();
  assert.deepEqual(rec.errors, []);
  // The 400s the form provoked are logged by Chromium as failed loads; nothing else.
  assert.deepEqual(
    rec.console.filter((m) => !/status of 400/.test(m)),
    [],
  );
});

test('read-only: the limits are shown, no control is', async () => {
  const ro = await new Service({}).start();
  started.push(ro);
  await putLimit(ro, 'ro-limit', { match: { exchange: 'amq.direct' }, rate_per_s: 10 });
  const { page } = await openPage(browser, ro);
  await visit(page, ro, '#/limits');
  await limitRow(page, 'ro-limit').waitFor();
  assert.equal(await page.getByRole('button').count(), 0, 'no button on the list');
  assert.equal(await page.locator('main form').count(), 0);
  await limitRow(page, 'ro-limit').getByRole('link', { name: 'ro-limit', exact: true }).click();
  await page.getByText('Read-only dashboard: no actions.').waitFor();
  assert.equal(await page.locator('main button, main form').count(), 0, 'no button or form on its page');
});

test('a limit holding jobs back: its held count links to them, each says held by it', async () => {
  const q = await queue(`rmqs-limits-${process.pid}`);
  try {
    await putLimit(svc, 'slow', { match: { exchange: '', routing_key: q.name }, rate_per_s: 0.2 });
    const ids = [];
    for (let i = 0; i < 3; i++) {
      ids.push((await svc.schedule({ exchange: '', routing_key: q.name, delay_ms: 0, priority: i, body: `j${i}` })).id);
    }
    // One goes at once, the others one every 5 s: two are held.
    const heldNow = async () => (await svc.api('GET', '/jobs?held_by=slow&status=pending')).body.jobs;
    await waitFor('jobs held by the limit', async () => (await heldNow()).length === 2);
    const { page, rec } = await openPage(browser, svc);
    await visit(page, svc, '#/limits');
    const link = limitRow(page, 'slow').locator('td[data-stat="held"] a');
    await waitFor('a held count', async () => /^[12]$/.test(await link.textContent()), 10000);
    await link.click();
    await page.waitForURL(/#\/jobs\?held_by=slow&status=pending$/);
    assert.equal(await page.locator('#f-held_by').inputValue(), 'slow');
    await page.locator('#list table').waitFor();
    const rows = page.locator('#list tbody tr');
    const n = await rows.count();
    assert.ok(n >= 1 && n <= 2, `${n} held jobs listed`);
    assert.equal(await page.locator('#list [data-held-by="slow"]').count(), n, 'each listed job has the badge');
    assert.equal(await page.locator('#list [data-held-by="slow"]').first().textContent(), 'held by slow');

    // A job held a few seconds more (the last one is, once the first held
    // one goes): its page says so while it waits.
    const last = await waitFor(
      'a job held a few seconds more',
      async () => (await heldNow()).find((j) => Date.parse(j.next_attempt_at) > Date.now() + 2500),
      15000,
    );
    await visit(page, svc, '#/jobs/' + last.id);
    await page.locator('[data-field="held_by"] a').waitFor();
    assert.equal(await page.locator('[data-field="held_by"] a').getAttribute('href'), '#/limits/slow');
    assert.equal(await page.locator('[data-field="priority"]').textContent(), String(last.priority));
    assert.match(await page.locator('[data-field="held_by"]').textContent(), /holds it now/);

    // Once sent, the job still says which limit held it back, and for how long.
    const done = await waitFor(
      'the held job to be sent',
      async () => {
        const j = await svc.job(last.id);
        return j.status === 'sent' && j;
      },
      30000,
      200,
    );
    assert.ok(done.held_ms > 0, JSON.stringify(done));
    await page.locator('#job-status').getByText('sent').waitFor({ timeout: 10000 });
    await page.locator('[data-field="held_by"] a').getByText('slow').waitFor();
    assert.match(await page.locator('[data-field="held_ms"]').textContent(), /^\d+(\.\d)? (ms|s)$/);
    await page.locator('[data-field="held_by"] a').click();
    await page.waitForURL(/#\/limits\/slow$/);
    await page.locator('[data-field="rate_per_s"]').getByText('0.2 a second').waitFor();
    assert.deepEqual(rec.errors, []);
    assert.deepEqual(rec.console, []);
  } finally {
    await q.close();
    await svc.api('DELETE', '/limits/slow');
  }
});

test('a hostile routing key pattern and key are inert text', async () => {
  const IMG = '<img src=x onerror="window.__pwned=1;alert(1)">';
  const SCRIPT = '<script>window.__pwned=2</script>';
  const r = await svc.api('PUT', '/limits/hostile', {
    match: { exchange: SCRIPT, routing_key: IMG },
    rate_per_s: 1,
    key: 'header:' + SCRIPT,
  });
  // Both are valid (a topic word may hold any of these characters): accepted.
  assert.equal(r.status, 201, JSON.stringify(r.body));
  assert.equal(r.body.match.routing_key, IMG);
  for (const route of ['#/limits', '#/limits/hostile']) {
    const { page, rec } = await openPage(browser, svc);
    await visit(page, svc, route);
    await page.getByText(IMG).first().waitFor();
    await page.getByText(SCRIPT).first().waitFor();
    assert.equal(await page.evaluate(() => window.__pwned), undefined, 'no injected script ran');
    assert.deepEqual(rec.dialogs, []);
    assert.equal(await page.locator('main img, main script').count(), 0, 'no element came of the data');
    assert.ok(!rec.requests.some((u) => u.endsWith('/x')), 'the img src was never fetched');
    assert.deepEqual(rec.errors, []);
    if (route === '#/limits/hostile') {
      // The form holds it as a value, and the preview as text.
      assert.equal(await page.getByLabel('Routing key', { exact: true }).inputValue(), IMG);
      assert.match(await page.locator('#limit-preview').textContent(), /^PATCH \/limits\/hostile\n\{\}$/);
    }
  }
  assert.equal((await svc.api('DELETE', '/limits/hostile')).status, 204);
});
