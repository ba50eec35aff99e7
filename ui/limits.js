// limits.js - flow limits (docs/flow-control.md): the list with each
// limit's live figures on this instance, one limit with its figures and,
// in "on" mode, a form to create one (PUT) or change it (PATCH, a merge
// patch of what the form changed) and delete it.
//
// The form sends what it is given: the server validates, and its message is
// shown on the field it names (error.field, a dotted path such as
// match.routing_key or hold_when_queue_ready_over.messages).
import { get, call, query, readOnly } from './api.js';
import {
  h,
  replace,
  table,
  field,
  dd,
  duration,
  when,
  toast,
  confirmDialog,
  fieldError,
  clearFieldErrors,
} from './dom.js';

const MEMBERS = ['match', 'rate_per_s', 'burst', 'key', 'max_buckets', 'hold_when_queue_ready_over'];
const REFRESH_MS = 3000;

const limitPath = (name) => '/limits/' + encodeURIComponent(name);
export const limitHref = (name) => '#/limits/' + encodeURIComponent(name);
const heldHref = (name) => '#/jobs' + query({ held_by: name, status: 'pending' });

const mono = (t) => h('span', { class: 'mono' }, t);
const num = (n) => (n === null || n === undefined ? '—' : Number(n).toLocaleString('en', { maximumFractionDigits: 2 }));
// A limit's exchange: omitted matches any, "" is the default exchange.
const exchangeText = (x) => (x === undefined ? 'any' : x === '' ? '"" (the default exchange)' : x);
const routingKeyText = (k) => (k === undefined ? 'any' : k);

function matchCell(m = {}) {
  return [
    'exchange ',
    m.exchange === undefined ? 'any' : mono(exchangeText(m.exchange)),
    h('br'),
    'routing key ',
    m.routing_key === undefined ? 'any' : mono(m.routing_key),
  ];
}

const rateText = (l) => (l.rate_per_s === undefined ? '—' : `${num(l.rate_per_s)}/s, burst ${num(l.burst)}`);

function keyCell(l) {
  if (l.key) return [mono(l.key), ` (at most ${num(l.max_buckets)} buckets)`];
  return l.rate_per_s === undefined ? '—' : 'one bucket';
}

function holdCell(l) {
  const q = l.hold_when_queue_ready_over;
  return q ? ['queue ', mono(q.queue), ` over ${num(q.messages)} ready`] : '—';
}

// The pending jobs the limit holds now, a link to them.
function heldCell(l) {
  const s = l.stats;
  if (!s) return '—';
  if (s.held_now === null) return '?';
  const n = num(s.held_now) + (s.held_now_capped ? '+' : '');
  return h('a', { href: heldHref(l.name), 'aria-label': `${n} jobs held by ${l.name}` }, n);
}

const waitText = (s) => (s.wait_ms.count ? `${duration(s.wait_ms.p50)} / ${duration(s.wait_ms.p99)}` : '—');

const HEAD = [
  'Name',
  'Matches',
  'Rate, burst',
  'Key',
  'Queue hold',
  'Rate now',
  'Held now',
  'Wait p50 / p99',
  'Buckets',
  'Overflow',
];

function row(l) {
  const s = l.stats;
  const stat = (f) => (s ? f(s) : '—');
  return h(
    'tr',
    { 'data-limit': l.name },
    h('td', {}, h('a', { href: limitHref(l.name) }, l.name)),
    h('td', {}, matchCell(l.match)),
    h('td', {}, rateText(l)),
    h('td', {}, keyCell(l)),
    h('td', {}, holdCell(l)),
    h(
      'td',
      { 'data-stat': 'rate' },
      stat((x) => num(x.rate_per_s) + '/s'),
    ),
    h('td', { 'data-stat': 'held' }, heldCell(l)),
    h('td', { 'data-stat': 'wait' }, stat(waitText)),
    h(
      'td',
      { 'data-stat': 'buckets' },
      stat((x) => num(x.buckets)),
    ),
    h(
      'td',
      { 'data-stat': 'overflow' },
      stat((x) => num(x.overflow)),
    ),
  );
}

function empty() {
  return h(
    'div',
    { id: 'no-limits' },
    h('p', {}, 'No limit yet.'),
    h(
      'p',
      {},
      'A limit paces the jobs it matches (by exchange and routing key pattern): a token bucket of ',
      mono('rate_per_s'),
      ' a second and ',
      mono('burst'),
      ' at once, for all of them or per tenant, or a hold while a queue has too many ready messages. ' +
        'Nothing is dropped: a job a limit holds back stays pending, and its ',
      mono('held_by'),
      ' names the limit.',
    ),
    h(
      'p',
      {},
      readOnly() ? 'Create one with ' : 'Create one with “New limit” above or ',
      mono('PUT /limits/{name}'),
      '; the whole story is in the documentation, ',
      mono('docs/flow-control.md'),
      '.',
    ),
  );
}

export function renderList(main, ctx) {
  const list = h('div', { id: 'limits' }, 'Loading…');
  const updated = h('p', { class: 'hint', 'aria-live': 'off' });
  const create = h('section', { id: 'new-limit', 'aria-label': 'New limit', hidden: true });
  let toggle = null;
  const show = (open) => {
    create.hidden = !open;
    toggle.setAttribute('aria-expanded', String(open));
    if (!open) return replace(create);
    replace(
      create,
      h('h2', {}, 'New limit'),
      limitForm(null, (l) => {
        toast('Created ' + l.name);
        show(false);
        toggle.focus();
        load();
      }),
    );
    create.querySelector('input').focus();
  };
  if (!readOnly()) {
    toggle = h(
      'button',
      {
        type: 'button',
        id: 'new',
        'aria-expanded': 'false',
        'aria-controls': 'new-limit',
        onclick: () => show(create.hidden),
      },
      'New limit…',
    );
  }
  replace(
    main,
    h('h1', {}, 'Limits'),
    h(
      'p',
      { class: 'hint' },
      'How fast the jobs each limit matches are published. The live figures are this instance’s, refreshed every 3 s.',
    ),
    toggle ? h('div', { class: 'actions' }, toggle) : null,
    create,
    list,
    updated,
  );

  let shown = null; // what the table shows, redrawn only when it changes
  async function load() {
    try {
      const { body } = await get('/limits');
      const text = JSON.stringify(body.limits);
      if (text !== shown) {
        shown = text;
        replace(list, body.limits.length ? table('Limits', HEAD, body.limits.map(row)) : empty());
      }
      updated.textContent = 'Updated ' + new Date().toLocaleTimeString();
    } catch (e) {
      shown = null;
      replace(list, h('p', { class: 'error', role: 'alert' }, e.message));
    }
  }
  load();
  ctx.every(REFRESH_MS, load);
}

export function renderOne(main, ctx, params, name) {
  const actions = h('div', { class: 'actions', id: 'actions' });
  const info = h('div', {});
  const live = h('div', { id: 'live' });
  const edit = h('div', { id: 'edit' });
  replace(
    main,
    h('h1', {}, 'Limit ', mono(name)),
    actions,
    info,
    h('h2', {}, 'Live figures (this instance)'),
    live,
    readOnly() ? null : edit,
  );
  const path = limitPath(name);
  let editing = false; // the form is made once, never redrawn under the user's typing

  function showEdit(l) {
    editing = true;
    replace(
      edit,
      h('h2', {}, 'Change'),
      limitForm(l, (changed) => {
        toast(changed.generation === l.generation ? 'Nothing changed' : 'Saved');
        showLimit(changed);
        showEdit(changed);
      }),
    );
  }

  function showLimit(l) {
    const m = l.match || {};
    replace(
      info,
      h(
        'dl',
        { class: 'fields' },
        dd('match.exchange', exchangeText(m.exchange)),
        dd('match.routing_key', routingKeyText(m.routing_key)),
        dd('rate_per_s', l.rate_per_s === undefined ? '—' : num(l.rate_per_s) + ' a second'),
        dd('burst', num(l.burst)),
        dd('key', keyCell(l)),
        dd('hold_when_queue_ready_over', holdCell(l)),
        dd('generation', String(l.generation)),
        dd('created_at', when(l.created_at)),
        dd('updated_at', when(l.updated_at)),
      ),
    );
    const s = l.stats;
    replace(
      live,
      s
        ? h(
            'dl',
            { class: 'fields' },
            dd('held now', heldCell(l)),
            dd('rate now', num(s.rate_per_s) + ' a second'),
            dd('granted', num(s.granted)),
            dd('held', num(s.held)),
            dd('delayed', num(s.delayed)),
            dd('overflow', num(s.overflow)),
            dd('buckets', num(s.buckets)),
            dd('waits', num(s.wait_ms.count)),
            dd('wait p50', duration(s.wait_ms.p50)),
            dd('wait p99', duration(s.wait_ms.p99)),
          )
        : h('p', { class: 'hint' }, 'The dispatcher of this instance has not read this limit yet.'),
      h('p', {}, h('a', { href: heldHref(name) }, 'The jobs it holds now')),
    );
  }

  async function load() {
    let l;
    try {
      l = (await get(path)).body;
    } catch (e) {
      replace(info, h('p', { class: 'error', role: 'alert' }, e.message));
      replace(live);
      replace(actions);
      replace(edit);
      editing = false;
      return;
    }
    showLimit(l);
    if (readOnly()) {
      replace(actions, h('p', { class: 'hint' }, 'Read-only dashboard: no actions.'));
      return;
    }
    if (editing) return;
    replace(
      actions,
      h('button', { type: 'button', class: 'danger', id: 'delete', onclick: () => remove() }, 'Delete…'),
    );
    showEdit(l);
  }

  async function remove() {
    const what = `Delete the limit ${name}? The jobs it matches are no longer held back by it.`;
    if (!(await confirmDialog('Delete limit', what, 'Delete'))) return;
    try {
      await call('DELETE', path);
      toast('Deleted ' + name);
      location.hash = '#/limits';
    } catch (e) {
      toast('Refused: ' + e.message);
    }
  }

  load();
  ctx.every(REFRESH_MS, load);
}

// A form value as a number when it is one; otherwise as typed, for the
// server to refuse on its field.
function number(v) {
  const t = v.trim();
  if (!t) return undefined;
  const n = Number(t);
  return Number.isFinite(n) ? n : t;
}

// Members compared whatever their keys' order.
function same(a, b) {
  const canon = (v) =>
    v && typeof v === 'object' ? JSON.stringify(Object.fromEntries(Object.entries(v).sort())) : JSON.stringify(v);
  return canon(a) === canon(b);
}

// The form of a limit: a new one (limit null; with its name, sent by PUT)
// or limit's members (what changed sent by PATCH, a removed member as
// null). onSaved(limit as the server answered) once it is accepted.
function limitForm(limit, onSaved) {
  const creating = !limit;
  const spec = limit || {};
  const m = spec.match || {};
  const hold = spec.hold_when_queue_ready_over || {};
  const kind = !spec.key ? '' : spec.key.startsWith('header:') ? 'header' : spec.key;
  const text = (name, value, more) =>
    h('input', { type: 'text', name, value: value ?? '', autocomplete: 'off', spellcheck: 'false', ...more });
  const inp = {
    name: creating ? text('name', '', { maxlength: '200' }) : null,
    exchange: text('exchange', m.exchange === '' ? '""' : m.exchange),
    routing_key: text('routing_key', m.routing_key),
    rate: text('rate_per_s', spec.rate_per_s, { inputmode: 'decimal' }),
    burst: text('burst', spec.burst, { inputmode: 'numeric' }),
    key: h(
      'select',
      { name: 'key' },
      [
        ['', 'one bucket for all'],
        ['header', 'per value of a header'],
        ['routing_key', 'per routing key'],
        ['exchange', 'per exchange'],
      ].map(([v, t]) => h('option', { value: v, selected: v === kind }, t)),
    ),
    header: text('header', kind === 'header' ? spec.key.slice('header:'.length) : ''),
    max_buckets: text('max_buckets', spec.key ? spec.max_buckets : '', { inputmode: 'numeric' }),
    queue: text('queue', hold.queue),
    messages: text('messages', hold.messages, { inputmode: 'numeric' }),
  };
  const headerField = field('limit-header', 'Header name', inp.header, 'the header whose values get a bucket each');
  const showHeader = () => {
    headerField.hidden = inp.key.value !== 'header';
  };
  showHeader();

  // error.field (a member's dotted path) -> the control to mark.
  const byField = {
    name: inp.name,
    'match.exchange': inp.exchange,
    'match.routing_key': inp.routing_key,
    rate_per_s: inp.rate,
    burst: inp.burst,
    key: () => (inp.key.value === 'header' ? inp.header : inp.key),
    max_buckets: inp.max_buckets,
    'hold_when_queue_ready_over.queue': inp.queue,
    'hold_when_queue_ready_over.messages': inp.messages,
  };
  function inputFor(f) {
    if (!f) return null;
    const k = f in byField ? f : Object.keys(byField).find((x) => x.startsWith(f + '.'));
    const v = k ? byField[k] : null;
    return typeof v === 'function' ? v() : v;
  }

  function specOf() {
    const s = {};
    const match = {};
    const x = inp.exchange.value.trim();
    if (x) match.exchange = x === '""' ? '' : x;
    const rk = inp.routing_key.value.trim();
    if (rk) match.routing_key = rk;
    if (Object.keys(match).length) s.match = match;
    const set = (k, v) => {
      if (v !== undefined) s[k] = v;
    };
    set('rate_per_s', number(inp.rate.value));
    set('burst', number(inp.burst.value));
    if (inp.key.value) s.key = inp.key.value === 'header' ? 'header:' + inp.header.value.trim() : inp.key.value;
    set('max_buckets', number(inp.max_buckets.value));
    const q = inp.queue.value.trim();
    const n = number(inp.messages.value);
    if (q || n !== undefined) s.hold_when_queue_ready_over = { queue: q, messages: n };
    return s;
  }

  function patchOf(next) {
    const p = {};
    for (const k of MEMBERS) {
      if (next[k] === undefined) {
        if (spec[k] !== undefined) p[k] = null;
      } else if (!same(spec[k], next[k])) p[k] = next[k];
    }
    return p;
  }

  const preview = h('pre', { id: 'limit-preview' });
  const status = h('div', { id: 'limit-status' });
  const submitButton = h('button', { type: 'submit', id: 'limit-save' }, creating ? 'Create limit' : 'Save changes');
  const request = () => {
    if (creating) return ['PUT', limitPath(inp.name.value.trim()), specOf()];
    return ['PATCH', limitPath(limit.name), patchOf(specOf())];
  };
  const update = () => {
    showHeader();
    const [method, path, body] = request();
    preview.textContent = `${method} ${path}\n${JSON.stringify(body, null, 2)}`;
  };

  function fail(e) {
    const input = inputFor(e.field);
    if (input) {
      fieldError(input, e.message);
      input.focus();
    }
    replace(status, h('p', { class: 'error', role: 'alert' }, 'Refused: ' + e.message));
  }

  async function submit(ev) {
    ev.preventDefault();
    clearFieldErrors(form);
    replace(status);
    const [method, path, body] = request();
    if (creating) {
      if (!inp.name.value.trim()) return fail({ field: 'name', message: 'name: give the limit a name' });
    } else if (!Object.keys(body).length) {
      toast('Nothing to change');
      return;
    }
    submitButton.disabled = true;
    try {
      // PUT replaces a limit of the same name: a new one must not (the
      // list, not GET of the name, whose 404 the console would log).
      const name = creating && inp.name.value.trim();
      if (creating && (await get('/limits')).body.limits.some((l) => l.name === name)) {
        return fail({ field: 'name', message: `name: a limit named ${name} exists; change it on its page` });
      }
      onSaved((await call(method, path, body)).body);
    } catch (e) {
      fail(e);
    } finally {
      submitButton.disabled = false;
    }
  }

  const form = h(
    'form',
    { class: 'edit', novalidate: true, 'aria-label': creating ? 'New limit' : 'Change the limit', onsubmit: submit },
    creating
      ? field('limit-name', 'Name', inp.name, 'letters, digits and . _ : - (at most 200); PUT /limits/{name}')
      : null,
    h(
      'fieldset',
      {},
      h('legend', {}, 'Which jobs'),
      field(
        'limit-exchange',
        'Exchange',
        inp.exchange,
        'exact, or a prefix ending in * (orders*); empty: any; "" the default exchange',
      ),
      field(
        'limit-routing_key',
        'Routing key',
        inp.routing_key,
        'a topic pattern: * one word, # any (eu.#); empty: any',
      ),
    ),
    h(
      'fieldset',
      {},
      h('legend', {}, 'Rate'),
      field('limit-rate', 'Jobs a second', inp.rate, 'rate_per_s, above 0 (0.5: one every 2 s); empty: no rate'),
      field('limit-burst', 'Burst', inp.burst, 'jobs at once after a quiet time (default 1); with a rate'),
      field('limit-key', 'Buckets', inp.key, 'one bucket per value (per tenant); with a rate'),
      headerField,
      field('limit-max_buckets', 'Max buckets', inp.max_buckets, 'live buckets at most (default 10,000); with a key'),
    ),
    h(
      'fieldset',
      {},
      h('legend', {}, 'Queue hold'),
      field('limit-queue', 'Hold while queue', inp.queue, 'a queue name; empty: no hold'),
      field('limit-messages', 'has more ready than', inp.messages, 'messages (0 or more)'),
    ),
    h('p', { class: 'hint' }, 'A limit needs a rate, a queue hold or both. The service checks the rest.'),
    h('div', { class: 'buttons' }, submitButton),
    status,
    h('h3', {}, 'The request'),
    preview,
  );
  form.addEventListener('input', update);
  form.addEventListener('change', update);
  update();
  return form;
}
