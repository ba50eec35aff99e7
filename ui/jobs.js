// jobs.js - the jobs list: every filter of GET /jobs, kept in the URL so a
// view can be shared; server-side pages (the `next` cursor), the count of
// matches, and bulk cancel / retry over the same filter.
import { get, call, query, readOnly } from './api.js';
import { h, replace, table, field, statusBadge, when, toast, confirmDialog } from './dom.js';

export const FILTERS = [
  ['status', 'Status', 'select', ['', 'pending', 'publishing', 'sent', 'failed', 'cancelled']],
  ['source', 'Source', 'select', ['', 'http', 'amqp', 'schedule']],
  ['exchange', 'Exchange'],
  ['routing_key', 'Routing key'],
  ['schedule', 'Schedule'],
  ['held_by', 'Held by', 'text', null, 'a limit\u2019s name'],
  ['message_id', 'Message id'],
  ['deliver_from', 'Due from', 'datetime-local'],
  ['deliver_to', 'Due to', 'datetime-local'],
  ['id_prefix', 'Id prefix', 'text', null, 'at least 4 hex digits'],
  ['header', 'Header', 'text', null, 'name:value'],
  ['q', 'Body contains', 'search', null, 'at least 3 characters, text bodies'],
];
const TIME_KEYS = new Set(['deliver_from', 'deliver_to']);
// The page's count stops at PAGE_COUNT ("More than 10,000"): a count walks
// an index up to its cap, and at 10 million jobs a cap of a million made a
// combined filter's count take seconds. A bulk action counts again, up to
// BULK_COUNT, for its confirmation: that wait is asked for.
const PAGE_COUNT = 10000;
const BULK_COUNT = 1000000;

// datetime-local (browser's time) <-> RFC 3339 UTC in the URL and the API.
function toLocalInput(iso) {
  const d = new Date(iso);
  if (isNaN(d)) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}
export function fromLocalInput(v) {
  if (!v) return '';
  const d = new Date(v);
  return isNaN(d) ? '' : d.toISOString();
}

// A pending job a limit holds back now.
const heldBadge = (name) => [' ', h('span', { class: 'badge held', 'data-held-by': name }, 'held by ' + name)];

export function render(main, ctx, params) {
  const filter = {};
  for (const [k] of FILTERS) if (params.get(k)) filter[k] = params.get(k);
  const after = params.get('after') || '';
  const limit = params.get('limit') || '50';

  const inputs = {};
  const form = h(
    'form',
    {
      class: 'filter',
      role: 'search',
      'aria-label': 'Filter jobs',
      onsubmit: (e) => {
        e.preventDefault();
        const q = {};
        for (const [k] of FILTERS) {
          const v = inputs[k].value.trim();
          if (v) q[k] = TIME_KEYS.has(k) ? fromLocalInput(v) : v;
        }
        q.limit = inputs.limit.value;
        location.hash = '#/jobs' + query(q);
      },
    },
    FILTERS.map(([k, label, type, options, hint]) => {
      let input;
      if (type === 'select') {
        input = h(
          'select',
          { name: k },
          options.map((o) => h('option', { value: o, selected: filter[k] === o }, o || 'any')),
        );
      } else {
        input = h('input', {
          name: k,
          type: type || 'text',
          step: type === 'datetime-local' ? '1' : null,
          value: TIME_KEYS.has(k) && filter[k] ? toLocalInput(filter[k]) : filter[k] || '',
        });
      }
      inputs[k] = input;
      return field('f-' + k, label, input, hint);
    }),
    field(
      'f-limit',
      'Per page',
      (inputs.limit = h(
        'select',
        { name: 'limit' },
        ['20', '50', '100', '500'].map((n) => h('option', { value: n, selected: n === limit }, n)),
      )),
    ),
    h(
      'div',
      { class: 'buttons' },
      h('button', { type: 'submit', id: 'apply' }, 'Search'),
      h(
        'button',
        {
          type: 'button',
          class: 'secondary',
          onclick: () => {
            location.hash = '#/jobs';
          },
        },
        'Clear',
      ),
    ),
  );

  const count = h('p', { id: 'count', 'aria-live': 'polite' }, 'Counting…');
  const list = h('div', { id: 'list' }, 'Loading…');
  const pager = h('div', { class: 'buttons' });
  const bulk = h('div', { class: 'actions', id: 'bulk' });
  const progress = h('div', { id: 'bulk-progress', 'aria-live': 'polite' });
  replace(main, h('h1', {}, 'Jobs'), form, count, readOnly() ? null : bulk, progress, list, pager);

  const counted = (body) => (body.capped ? 'more than ' : '') + body.count.toLocaleString('en');
  get('/jobs/count' + query({ ...filter, max: PAGE_COUNT }))
    .then(({ body }) => {
      const n = counted(body);
      count.textContent = n[0].toUpperCase() + n.slice(1) + ' matching jobs';
    })
    .catch((e) => {
      count.textContent = 'Count not available: ' + e.message;
    });

  get('/jobs' + query({ ...filter, limit, after }))
    .then(({ body }) => {
      const rows = body.jobs.map((j) =>
        h(
          'tr',
          {},
          h('td', { class: 'mono' }, h('a', { href: '#/jobs/' + encodeURIComponent(j.id) }, j.id)),
          h('td', {}, statusBadge(j.status), j.status === 'pending' && j.held_by ? heldBadge(j.held_by) : null),
          h('td', {}, j.exchange),
          h('td', {}, j.routing_key),
          h('td', {}, when(j.deliver_at)),
          h('td', {}, String(j.attempts) + ' / ' + j.max_attempts),
        ),
      );
      replace(
        list,
        rows.length
          ? table('Jobs', ['Id', 'Status', 'Exchange', 'Routing key', 'Due (UTC / local)', 'Attempts'], rows)
          : h('p', {}, 'No job matches.'),
      );
      replace(
        pager,
        after ? h('a', { href: '#/jobs' + query({ ...filter, limit }) }, 'First page') : null,
        body.next
          ? h('a', { id: 'next-page', href: '#/jobs' + query({ ...filter, limit, after: body.next }) }, 'Next page')
          : null,
      );
    })
    .catch((e) => replace(list, h('p', { class: 'error', role: 'alert' }, e.message)));

  if (!readOnly()) {
    const run = async (action) => {
      const f = {};
      for (const [k, v] of Object.entries(filter)) f[k] = v;
      let n = 'an unknown number of';
      replace(progress, h('p', {}, 'Counting the matching jobs…'));
      try {
        n = counted((await get('/jobs/count' + query({ ...filter, max: BULK_COUNT }))).body);
      } catch (e) {
        /* the confirmation says the number is unknown */
      }
      replace(progress);
      const what =
        action === 'cancel'
          ? `Cancel ${n} matching jobs (those still pending)?`
          : `Retry ${n} matching jobs (the failed ones go back to pending, attempts reset)?`;
      if (
        !(await confirmDialog(
          action === 'cancel' ? 'Cancel jobs' : 'Retry jobs',
          what,
          action === 'cancel' ? 'Cancel jobs' : 'Retry jobs',
        ))
      )
        return;
      const body = { action, filter: f };
      if (!Object.keys(f).length) body.all = true;
      try {
        const r = (await call('POST', '/jobs/bulk', body)).body;
        watchBulk(ctx, progress, r);
      } catch (e) {
        replace(progress, h('p', { class: 'error', role: 'alert' }, e.message));
      }
    };
    replace(
      bulk,
      h(
        'button',
        { type: 'button', class: 'danger', id: 'bulk-cancel', onclick: () => run('cancel') },
        'Cancel all matching…',
      ),
      h(
        'button',
        { type: 'button', class: 'secondary', id: 'bulk-retry', onclick: () => run('retry') },
        'Retry failed matching…',
      ),
    );
  }
}

function showBulk(el, b) {
  const total = b.matched_so_far || 0;
  replace(
    el,
    h(
      'p',
      {},
      `Bulk ${b.action}: ${b.state}; ${b.done} done, ${b.skipped} skipped, ${b.errors} errors of ${total} matched so far`,
    ),
    h('progress', { max: Math.max(total, 1), value: b.done + b.skipped + b.errors, 'aria-label': 'Bulk progress' }),
  );
  el.dataset.state = b.state;
}

function watchBulk(ctx, el, b) {
  showBulk(el, b);
  const poll = async () => {
    if (b.state !== 'running') return;
    try {
      b = (await get('/jobs/bulk/' + encodeURIComponent(b.id))).body;
      showBulk(el, b);
      if (b.state !== 'running') toast(`Bulk ${b.action} ${b.state}: ${b.done} done`);
    } catch (e) {
      replace(el, h('p', { class: 'error', role: 'alert' }, e.message));
      b.state = 'failed';
    }
  };
  ctx.every(500, poll);
}
