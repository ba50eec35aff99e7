// overview.js - live counts per status, health, rates and lateness.
import { get, text, query } from './api.js';
import { h, replace, table, num, utc } from './dom.js';
import { lineChart } from './chart.js';

const STATUSES = ['pending', 'publishing', 'sent', 'failed', 'cancelled'];

// rmqs_jobs{status="x"} N from /metrics (exact counts from the store).
function countsFromMetrics(m) {
  const out = {};
  for (const line of m.split('\n')) {
    // Other labels (store, on a shared database) may come before or after.
    const r = /^rmqs_jobs\{(?:[^}]*,)?status="([a-z]+)"[^}]*\} (\d+)/.exec(line);
    if (r) out[r[1]] = Number(r[2]);
  }
  return out;
}

export function render(main, ctx) {
  const cards = h('ul', { class: 'cards', 'aria-label': 'Jobs by status' });
  const health = h('ul', { class: 'cards', 'aria-label': 'Health' });
  const rates = h('div', {});
  const charts = h('div', { class: 'charts' });
  const failures = h('div', { id: 'failures' });
  const win = h(
    'select',
    { onchange: () => refresh() },
    ['15m', '1h', '6h'].map((w) => h('option', { value: w, selected: w === '1h' }, w)),
  );
  win.id = 'window';
  const updated = h('p', { class: 'hint', 'aria-live': 'off' });
  replace(
    main,
    h('h1', {}, 'Overview'),
    h('section', { 'aria-labelledby': 'h-status' }, h('h2', { id: 'h-status' }, 'Jobs by status'), cards),
    h('section', { 'aria-labelledby': 'h-health' }, h('h2', { id: 'h-health' }, 'Health'), health),
    failures,
    h(
      'section',
      { 'aria-labelledby': 'h-rates' },
      h('h2', { id: 'h-rates' }, 'Rates and lateness'),
      h('div', { class: 'field narrow' }, h('label', { for: 'window' }, 'Window'), win),
      rates,
      charts,
    ),
    updated,
  );

  async function refresh() {
    try {
      const [m, ready] = await Promise.all([text('/metrics'), get('/readyz', [503])]);
      const counts = countsFromMetrics(m);
      replace(
        cards,
        STATUSES.map((s) =>
          h(
            'li',
            { class: 'card' },
            h('div', { class: 'label' }, h('a', { href: '#/jobs?status=' + s }, s)),
            h(
              'div',
              { class: 'value' + (s === 'failed' && counts[s] > 0 ? ' down' : ''), 'data-status': s },
              num(counts[s]) ?? '—',
            ),
          ),
        ),
      );
      const r = ready.body || {};
      const comps = ['database', 'broker'].concat(r.ingest ? ['ingest'] : []);
      replace(
        health,
        comps.map((k) =>
          h(
            'li',
            { class: 'card' },
            h('div', { class: 'label' }, k),
            h('div', { class: 'value ' + (r[k] === 'up' ? 'up' : 'down'), 'data-health': k }, r[k] || '?'),
          ),
        ),
      );
    } catch (e) {
      replace(cards, h('li', { class: 'error' }, 'Cannot read the counts: ' + e.message));
    }
    try {
      const st = (await get('/stats' + query({ window: win.value }))).body;
      const samples = st.samples || [];
      const xs = samples.map((s) => Date.parse(s.t));
      const per = (st.interval_s || 1) / 60;
      const col = (k, f = 1) => samples.map((s) => (s[k] == null ? null : s[k] / f));
      const sum = (k) => samples.reduce((a, s) => a + (s[k] || 0), 0);
      // The newest interval's lateness; none sent in it says so, rather
      // than a value from before (which looked fine through an outage).
      const newest = samples[samples.length - 1];
      const late = (k) => (!newest ? null : newest[k] == null ? 'no sends' : newest[k] + ' ms');
      replace(
        rates,
        h(
          'ul',
          { class: 'cards', 'aria-label': 'Totals over the window' },
          [
            ['scheduled', sum('scheduled')],
            ['sent', sum('sent')],
            ['failed', sum('failed')],
            ['late p50', late('late_p50_ms')],
            ['late p90', late('late_p90_ms')],
            ['late p99', late('late_p99_ms')],
          ].map(([k, v]) =>
            h(
              'li',
              { class: 'card' },
              h('div', { class: 'label' }, k),
              h(
                'div',
                { class: 'value' + (k === 'failed' && v > 0 ? ' down' : ''), 'data-rate': k },
                v == null ? '—' : typeof v === 'number' ? num(v) : v,
              ),
            ),
          ),
        ),
      );
      replace(
        charts,
        lineChart(
          'Jobs per minute',
          xs,
          [
            { name: 'scheduled', values: col('scheduled', per) },
            { name: 'sent', values: col('sent', per) },
            { name: 'failed', values: col('failed', per) },
          ],
          '/min',
        ),
        lineChart(
          'Lateness (ms)',
          xs,
          [
            { name: 'p50', values: col('late_p50_ms') },
            { name: 'p90', values: col('late_p90_ms') },
            { name: 'p99', values: col('late_p99_ms') },
          ],
          ' ms',
        ),
        lineChart('Pending jobs', xs, [{ name: 'pending', values: col('pending') }]),
      );
    } catch (e) {
      replace(rates, h('p', { class: 'hint' }, 'Rates are not available: ' + e.message));
      replace(charts);
    }
    if (Date.now() - failuresAt >= 15000) {
      failuresAt = Date.now();
      await showFailures();
    }
    updated.textContent = 'Updated ' + new Date().toLocaleTimeString();
  }

  // Why jobs failed, by exchange: the most common reasons among the last
  // failed jobs, each linked to its jobs.
  let failuresAt = 0;
  async function showFailures() {
    let f;
    try {
      f = (await get('/stats/failures')).body;
    } catch (e) {
      replace(
        failures,
        e.status === 404 ? [] : h('p', { class: 'hint' }, 'Failure reasons are not available: ' + e.message),
      );
      return;
    }
    const groups = (f && f.groups) || [];
    if (!groups.length) {
      replace(failures);
      return;
    }
    replace(
      failures,
      h(
        'section',
        { 'aria-labelledby': 'h-failures' },
        h('h2', { id: 'h-failures' }, 'Top failure reasons'),
        h('p', { class: 'hint' }, `Among the last ${num(f.window_jobs)} failed jobs.`),
        table(
          'Top failure reasons',
          ['Exchange', 'Error', 'Jobs', 'Last failed'],
          groups.map((g) =>
            h(
              'tr',
              {},
              h(
                'td',
                { class: 'mono' },
                h(
                  'a',
                  { href: '#/jobs' + query({ status: 'failed', exchange: g.exchange }) },
                  g.exchange || '(default)',
                ),
              ),
              h('td', { class: 'mono' }, g.error),
              h('td', {}, num(g.count)),
              h('td', {}, utc(g.last_failed_at)),
            ),
          ),
        ),
      ),
    );
  }
  refresh();
  ctx.every(3000, refresh);
}
