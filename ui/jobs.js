// jobs.js - the jobs list: every filter of GET /jobs, kept in the URL so a
// view can be shared (the form folds behind one "Filter" button, open when
// a filter is set); server-side pages (the `next` cursor), the count of
// matches; bulk cancel / retry over the same filter (only the one that
// applies to its status), and over the rows ticked on the page, job by job.
import { get, call, query, readOnly } from './api.js';
import { h, replace, table, field, statusBadge, when, toast, confirmDialog, num, plural, utc } from './dom.js';

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
// GET /jobs's orders; the page opens on the newest jobs.
const ORDERS = [
  ['-created', 'Newest first'],
  ['created', 'Oldest first'],
  ['due', 'Due soonest first'],
  ['-due', 'Due latest first'],
];
const DEFAULT_ORDER = '-created';
// The first page refreshes itself this often unless paused.
const LIVE_MS = 5000;
// A pending job this late is overdue (as GET /status counts them).
const OVERDUE_MS = 1000;
const overdue = (j, now) =>
  (j.status === 'pending' || j.status === 'publishing') && Date.parse(j.deliver_at) < now - OVERDUE_MS;
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

// An error in a list: its first line, 160 characters at most (the job's
// page has the whole of it).
const clip = (e) => {
  const line = e.split('\n', 1)[0];
  return line.length > 160 ? line.slice(0, 159) + '\u2026' : line;
};

// A pending job a limit holds back now.
const heldBadge = (name) => [' ', h('span', { class: 'badge held', 'data-held-by': name }, 'held by ' + name)];

// The filter in words, one item a field, for the bulk confirmation.
const WORDS = {
  status: (v) => `status is ${v}`,
  source: (v) => `created by ${v}`,
  exchange: (v) => `exchange is \u201c${v}\u201d`,
  routing_key: (v) => `routing key is \u201c${v}\u201d`,
  schedule: (v) => `made by the schedule \u201c${v}\u201d`,
  held_by: (v) => `held by the limit \u201c${v}\u201d`,
  message_id: (v) => `message id is \u201c${v}\u201d`,
  deliver_from: (v) => `due at or after ${utc(v)}`,
  deliver_to: (v) => `due before ${utc(v)}`,
  id_prefix: (v) => `id starts with \u201c${v}\u201d`,
  header: (v) => {
    const i = v.indexOf(':');
    return i < 0
      ? `has the header \u201c${v}\u201d`
      : `header \u201c${v.slice(0, i)}\u201d is \u201c${v.slice(i + 1)}\u201d`;
  },
  q: (v) => `body contains \u201c${v}\u201d`,
};
export function filterWords(filter) {
  const keys = FILTERS.map(([k]) => k).filter((k) => filter[k]);
  if (!keys.length) return h('p', {}, 'No filter: every job in the store.');
  return h(
    'ul',
    { id: 'confirm-filter' },
    keys.map((k) => h('li', {}, WORDS[k](filter[k]))),
  );
}

const ACTIONS = {
  cancel: { status: 'pending', verb: 'Cancel', done: 'cancelled' },
  retry: { status: 'failed', verb: 'Retry', done: 'sent back to pending' },
};

export function render(main, ctx, params) {
  const filter = {};
  for (const [k] of FILTERS) if (params.get(k)) filter[k] = params.get(k);
  const after = params.get('after') || '';
  const limit = params.get('limit') || '50';
  const order = ORDERS.some(([o]) => o === params.get('order')) ? params.get('order') : DEFAULT_ORDER;
  // What every link of this view keeps: the filter, the page size, the order.
  const view = (more) => query({ ...filter, limit, order: order === DEFAULT_ORDER ? '' : order, ...more });
  const nSet = Object.keys(filter).length;
  const editable = !readOnly();

  const inputs = {};
  const form = h(
    'form',
    {
      class: 'filter',
      id: 'filter-form',
      role: 'search',
      'aria-label': 'Filter jobs',
      hidden: !nSet,
      onsubmit: (e) => {
        e.preventDefault();
        const q = {};
        for (const [k] of FILTERS) {
          const v = inputs[k].value.trim();
          if (v) q[k] = TIME_KEYS.has(k) ? fromLocalInput(v) : v;
        }
        q.limit = inputs.limit.value;
        if (inputs.order.value !== DEFAULT_ORDER) q.order = inputs.order.value;
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
    field(
      'f-order',
      'Order',
      (inputs.order = h(
        'select',
        { name: 'order' },
        ORDERS.map(([o, words]) => h('option', { value: o, selected: o === order }, words)),
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
  const toggle = h(
    'button',
    {
      type: 'button',
      id: 'filter-toggle',
      class: 'secondary',
      'aria-expanded': nSet ? 'true' : 'false',
      'aria-controls': 'filter-form',
      onclick: () => {
        form.hidden = !form.hidden;
        toggle.setAttribute('aria-expanded', form.hidden ? 'false' : 'true');
        if (!form.hidden) form.querySelector('input, select').focus();
      },
    },
    'Filter',
    nSet ? ` (${nSet} set)` : null,
  );

  // Live updates of the first page, with a pause (a later page stays as
  // it was: its cursor is a place in the list, not a moment).
  let live = !after;
  const liveNote = h('span', { class: 'hint', id: 'live-note' });
  const liveButton = h(
    'button',
    {
      type: 'button',
      class: 'secondary',
      id: 'live-toggle',
      'aria-pressed': live ? 'true' : 'false',
      hidden: !!after,
      onclick: () => {
        live = !live;
        liveButton.setAttribute('aria-pressed', live ? 'true' : 'false');
        liveButton.textContent = live ? 'Pause updates' : 'Resume updates';
        liveNote.textContent = live ? '' : 'Paused';
        if (live) reload();
      },
    },
    'Pause updates',
  );
  const count = h('p', { id: 'count', 'aria-live': 'polite' }, 'Counting…');
  const list = h('div', { id: 'list' }, 'Loading…');
  const pager = h('div', { class: 'buttons' });
  const bulk = h('div', { class: 'actions', id: 'bulk' });
  const selection = h('div', { class: 'actions', id: 'selection' });
  const progress = h('div', { id: 'bulk-progress', 'aria-live': 'polite' });
  replace(
    main,
    h('h1', {}, 'Jobs'),
    h('div', { class: 'actions' }, toggle, liveButton, liveNote),
    form,
    count,
    editable ? [selection, progress] : null,
    list,
    pager,
    editable ? bulk : null,
  );

  const counted = (body) => (body.capped ? 'more than ' : '') + num(body.count);
  const many = (body) => body.capped || body.count !== 1;
  async function loadCount() {
    try {
      const { body } = await get('/jobs/count' + query({ ...filter, max: PAGE_COUNT }));
      const n = counted(body);
      if (count.dataset.n === n) return; /* a live update that changed nothing says nothing */
      count.dataset.n = n;
      count.textContent = n[0].toUpperCase() + n.slice(1) + (many(body) ? ' matching jobs' : ' matching job');
    } catch (e) {
      count.textContent = 'Count not available: ' + e.message;
    }
  }

  // The rows ticked on this page: id -> status.
  const picked = new Map();
  let shown = [];
  function showSelection() {
    if (!editable) return;
    for (const cb of list.querySelectorAll('input[data-pick]')) cb.checked = picked.has(cb.dataset.pick);
    const all = list.querySelector('#pick-all');
    if (all) {
      all.checked = shown.length > 0 && picked.size === shown.length;
      all.indeterminate = picked.size > 0 && picked.size < shown.length;
    }
    const of = (st) => [...picked.values()].filter((x) => x === st).length;
    const buttons = [];
    for (const [action, a] of Object.entries(ACTIONS)) {
      const n = of(a.status);
      if (n)
        buttons.push(
          h(
            'button',
            {
              type: 'button',
              class: action === 'cancel' ? 'danger' : '',
              id: 'pick-' + action,
              onclick: () => runPicked(action),
            },
            `${a.verb} ${num(n)} selected ${plural(n, 'job')}…`,
          ),
        );
    }
    replace(
      selection,
      picked.size
        ? [
            h('span', { id: 'picked' }, `${num(picked.size)} selected`),
            buttons.length ? buttons : h('span', { class: 'hint' }, '(none of them pending or failed)'),
            h(
              'button',
              {
                type: 'button',
                class: 'secondary',
                onclick: () => {
                  picked.clear();
                  showSelection();
                },
              },
              'Clear selection',
            ),
          ]
        : null,
    );
  }

  async function loadList() {
    try {
      const { body } = await get('/jobs' + query({ ...filter, limit, after, order }));
      shown = body.jobs;
      const now = Date.now();
      // Failed jobs bring their triage columns: when, and why.
      const triage = shown.some((j) => j.status === 'failed' || j.last_error);
      for (const id of [...picked.keys()]) if (!shown.some((j) => j.id === id)) picked.delete(id);
      for (const j of shown) if (picked.has(j.id)) picked.set(j.id, j.status);
      const rows = body.jobs.map((j) =>
        h(
          'tr',
          { 'data-job': j.id, class: 'job-row' },
          editable
            ? h(
                'td',
                { class: 'c-pick' },
                h('input', {
                  type: 'checkbox',
                  'data-pick': j.id,
                  'aria-label': 'Select job ' + j.id,
                  onchange: (e) => {
                    if (e.target.checked) picked.set(j.id, j.status);
                    else picked.delete(j.id);
                    showSelection();
                  },
                }),
              )
            : null,
          h('td', { class: 'mono c-id' }, h('a', { href: '#/jobs/' + encodeURIComponent(j.id) }, j.id)),
          h(
            'td',
            { class: 'c-status' },
            statusBadge(j.status),
            j.status === 'pending' && j.held_by ? heldBadge(j.held_by) : null,
            overdue(j, now) && !j.held_by ? [' ', h('span', { class: 'badge overdue' }, 'overdue')] : null,
          ),
          h('td', { class: 'c-ex' }, j.exchange === '' ? h('span', { class: 'hint' }, '(default)') : j.exchange),
          h('td', { class: 'c-rk' }, j.routing_key),
          h('td', { class: 'c-due' }, when(j.deliver_at)),
          h('td', { class: 'c-att' }, String(j.attempts) + ' / ' + j.max_attempts),
          triage ? h('td', { class: 'c-failed' }, j.failed_at ? utc(j.failed_at) : '\u2014') : null,
          triage ? h('td', { class: 'mono c-err' }, j.last_error ? clip(j.last_error) : '\u2014') : null,
        ),
      );
      const pickAll = editable
        ? h('input', {
            type: 'checkbox',
            id: 'pick-all',
            'aria-label': 'Select every job on this page',
            onchange: (e) => {
              picked.clear();
              if (e.target.checked) for (const j of shown) picked.set(j.id, j.status);
              showSelection();
            },
          })
        : null;
      const head = ['Id', 'Status', 'Exchange', 'Routing key', 'Due (UTC / local)', 'Attempts'].concat(
        triage ? ['Failed at (UTC)', 'Last error'] : [],
      );
      replace(
        list,
        rows.length
          ? table('Jobs', editable ? [pickAll, ...head] : head, rows, 'as-cards jobs-table')
          : h('p', {}, 'No job matches.'),
      );
      showSelection();
      replace(
        pager,
        after ? h('a', { href: '#/jobs' + view() }, 'First page') : null,
        body.next ? h('a', { id: 'next-page', href: '#/jobs' + view({ after: body.next }) }, 'Next page') : null,
      );
    } catch (e) {
      replace(list, h('p', { class: 'error', role: 'alert' }, e.message));
    }
  }
  const reload = () => Promise.all([loadCount(), loadList()]);
  reload();
  ctx.every(LIVE_MS, () => {
    // Not under the reader's hands: a dialog, an action running, focus in the list.
    if (!live || document.querySelector('dialog[open]') || progress.dataset.state === 'running') return null;
    if (list.contains(document.activeElement)) return null;
    return reload();
  });
  if (!editable) return;

  // The ticked jobs, one request each (DELETE /jobs/{id}, POST
  // /jobs/{id}/retry), with progress and each refusal reported.
  async function runPicked(action) {
    const a = ACTIONS[action];
    const ids = [...picked].filter(([, st]) => st === a.status).map(([id]) => id);
    const n = ids.length;
    const ok = await confirmDialog(
      `${a.verb} ${plural(n, 'job')}`,
      [
        h('p', {}, `${a.verb} the ${num(n)} selected ${a.status} ${plural(n, 'job')}:`),
        h(
          'ul',
          { id: 'confirm-ids', class: 'mono' },
          ids.slice(0, 10).map((id) => h('li', {}, id)),
          n > 10 ? h('li', {}, `and ${num(n - 10)} more`) : null,
        ),
      ],
      `${a.verb} ${num(n)} ${plural(n, 'job')}`,
      n === 1 ? 'Keep it' : 'Keep them',
    );
    if (!ok) return;
    let done = 0;
    const errors = [];
    const errList = h('ul', { id: 'pick-errors' });
    const line = h('p', {});
    const bar = h('progress', { max: n, value: 0, 'aria-label': 'Progress' });
    replace(progress, line, bar, errList);
    progress.dataset.state = 'running';
    const show = () => {
      line.textContent = `${a.verb}: ${num(done)} of ${num(n)} done, ${num(errors.length)} ${plural(errors.length, 'error')}`;
      bar.value = done + errors.length;
    };
    show();
    for (const id of ids) {
      try {
        if (action === 'cancel') await call('DELETE', '/jobs/' + encodeURIComponent(id));
        else await call('POST', '/jobs/' + encodeURIComponent(id) + '/retry');
        done++;
      } catch (e) {
        errors.push(id);
        errList.appendChild(h('li', { 'data-job': id }, h('span', { class: 'mono' }, id), ': ', e.message));
      }
      show();
    }
    progress.dataset.state = 'done';
    picked.clear();
    toast(`${num(done)} ${plural(done, 'job')} ${a.done}` + (errors.length ? `, ${errors.length} refused` : ''));
    await reload();
  }

  // Every job the filter matches (POST /jobs/bulk): only the action that
  // applies to the filter's status; on a list of any status both, as
  // secondary buttons.
  async function runAll(action) {
    const a = ACTIONS[action];
    const target = { ...filter, status: a.status };
    let n = 'an unknown number of';
    let one = false;
    replace(progress, h('p', {}, 'Counting the matching jobs…'));
    try {
      const { body } = await get('/jobs/count' + query({ ...target, max: BULK_COUNT }));
      n = counted(body);
      one = !many(body);
    } catch {
      /* the confirmation says the number is unknown */
    }
    replace(progress);
    const jobs = one ? 'job' : 'jobs';
    if (
      !(await confirmDialog(
        `${a.verb} ${a.status} jobs`,
        [
          h('p', {}, `This acts on every ${a.status} job that matches:`),
          filterWords(target),
          h('p', { id: 'confirm-count' }, `${n[0].toUpperCase() + n.slice(1)} ${jobs} now.`),
        ],
        `${a.verb} ${n} ${jobs}`,
        one ? 'Keep it' : 'Keep them',
      ))
    )
      return;
    const req = { action, filter: target };
    try {
      const r = (await call('POST', '/jobs/bulk', req)).body;
      watchBulk(ctx, progress, r, reload);
    } catch (e) {
      replace(progress, h('p', { class: 'error', role: 'alert' }, e.message));
    }
  }
  const offered = Object.entries(ACTIONS).filter(([, a]) => !filter.status || filter.status === a.status);
  replace(
    bulk,
    offered.map(([action, a]) =>
      h(
        'button',
        {
          type: 'button',
          class: filter.status ? (action === 'cancel' ? 'danger' : '') : 'secondary',
          id: 'bulk-' + action,
          onclick: () => runAll(action),
        },
        `${a.verb} all matching ${a.status} jobs…`,
      ),
    ),
  );
}

function showBulk(el, b) {
  const total = b.matched_so_far || 0;
  replace(
    el,
    h(
      'p',
      {},
      `Bulk ${b.action}: ${b.state}; ${num(b.done)} done, ${num(b.skipped)} skipped, ${num(b.errors)} ${plural(b.errors, 'error')} of ${num(total)} matched so far`,
    ),
    h('progress', { max: Math.max(total, 1), value: b.done + b.skipped + b.errors, 'aria-label': 'Bulk progress' }),
  );
  el.dataset.state = b.state;
}

// Follows a bulk action until it ends, then refreshes the list and count.
function watchBulk(ctx, el, b, reload) {
  showBulk(el, b);
  const poll = async () => {
    if (b.state !== 'running') return;
    try {
      b = (await get('/jobs/bulk/' + encodeURIComponent(b.id))).body;
      if (b.state !== 'running') {
        await reload();
        toast(`Bulk ${b.action} ${b.state}: ${num(b.done)} done`);
      }
      showBulk(el, b);
    } catch (e) {
      replace(el, h('p', { class: 'error', role: 'alert' }, e.message));
      b.state = 'failed';
    }
  };
  ctx.every(500, poll);
}
