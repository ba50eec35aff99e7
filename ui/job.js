// job.js - one job: every field, the body shown safely (JSON pretty-printed,
// text as text, binary as hex and base64), its actions, live status.
import { get, call, readOnly } from './api.js';
import { h, replace, table, dd, duration, statusBadge, when, utc, toast, confirmDialog, num } from './dom.js';
import { fromLocalInput } from './jobs.js';
import { limitHref } from './limits.js';

function hexDump(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const row = Array.from(bytes.slice(i, i + 16));
    lines.push(
      i.toString(16).padStart(8, '0') +
        '  ' +
        row
          .map((b) => b.toString(16).padStart(2, '0'))
          .join(' ')
          .padEnd(48) +
        '  ' +
        row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join(''),
    );
  }
  return lines.join('\n');
}

function bodyView(j) {
  if (j.body_base64 !== undefined) {
    let bytes = new Uint8Array();
    try {
      bytes = Uint8Array.from(atob(j.body_base64), (c) => c.charCodeAt(0));
    } catch {
      /* shown as base64 only */
    }
    return [
      h('p', {}, `Binary, ${num(bytes.length)} bytes`),
      h('h3', {}, 'Hex'),
      h('pre', { id: 'body-hex' }, hexDump(bytes)),
      h('h3', {}, 'Base64'),
      h('pre', { id: 'body-base64' }, j.body_base64),
    ];
  }
  if (typeof j.body === 'string') {
    try {
      const v = JSON.parse(j.body);
      if (v !== null && typeof v === 'object')
        return [h('p', {}, 'JSON text'), h('pre', { id: 'body' }, JSON.stringify(v, null, 2))];
    } catch {
      /* plain text */
    }
    return [h('p', {}, 'Text'), h('pre', { id: 'body' }, j.body)];
  }
  return [h('p', {}, 'JSON'), h('pre', { id: 'body' }, JSON.stringify(j.body, null, 2))];
}

function kvTable(label, obj) {
  const entries = Object.entries(obj || {});
  if (!entries.length) return h('p', { class: 'hint' }, 'None.');
  return table(
    label,
    ['Name', 'Value'],
    entries.map(([k, v]) =>
      h(
        'tr',
        {},
        h('td', { class: 'mono' }, k),
        h('td', { class: 'mono' }, typeof v === 'string' ? v : JSON.stringify(v)),
      ),
    ),
  );
}

// What the common broker answers mean and what to do about them (the
// reply texts RabbitMQ sends, as the service records them).
const HINTS = [
  [
    /NOT_FOUND - no exchange/,
    'The exchange does not exist on the broker (in this virtual host). Declare it, or correct the job\u2019s exchange, then retry.',
  ],
  [
    /NO_ROUTE|\b312\b/,
    'The exchange exists but no queue is bound for this routing key, so the broker returned the message. Bind a queue (or fix the routing key), then retry.',
  ],
  [
    /ACCESS_REFUSED|\b403\b/,
    'The service\u2019s broker user may not publish to this exchange. Grant it write permission (rabbitmqctl set_permissions), then retry.',
  ],
  [
    /PRECONDITION_FAILED|\b406\b/,
    'The broker refused the message as sent (a property or the exchange\u2019s arguments). Check the job\u2019s properties against the exchange.',
  ],
  [
    /nack/i,
    'The broker refused to take the message (nack): for example a queue at its length limit with overflow reject-publish, or a full disk on the broker.',
  ],
];

export function hintFor(error) {
  for (const [re, text] of HINTS) if (re.test(error || '')) return text;
  return null;
}

// A failed job (or one whose last attempt failed) opens with its error.
function callout(j) {
  if (!j.last_error || (j.status !== 'failed' && j.status !== 'pending')) return null;
  const hint = hintFor(j.last_error);
  return h(
    'section',
    { class: 'callout', id: 'error-callout', 'aria-labelledby': 'h-error' },
    h(
      'h2',
      { id: 'h-error' },
      j.status === 'failed'
        ? `Failed after ${j.attempts} ${j.attempts === 1 ? 'attempt' : 'attempts'}`
        : `Attempt ${j.attempts} of ${j.max_attempts} failed; it will be tried again`,
    ),
    j.failed_at ? h('p', {}, 'At ', when(j.failed_at)) : null,
    h('p', { class: 'mono', id: 'error-text' }, j.last_error),
    hint ? h('p', { id: 'error-hint' }, h('strong', {}, 'What it usually means: '), hint) : null,
  );
}

// Each attempt's error, oldest first (the service keeps the last ten).
function timeline(j) {
  const a = j.attempt_errors;
  if (!Array.isArray(a) || !a.length) return null;
  return [
    h('h2', {}, 'Attempts'),
    h(
      'ol',
      { class: 'timeline', id: 'attempts', 'aria-label': 'Failed attempts, oldest first' },
      a.map((e) =>
        h(
          'li',
          {},
          h('strong', {}, `Attempt ${e.attempt}`),
          ' · ',
          h('time', { datetime: e.at }, utc(e.at)),
          h('div', { class: 'mono' }, e.error),
        ),
      ),
    ),
  ];
}

// The limit that holds the job back now (pending) or last did, linked.
function heldBy(j) {
  if (!j.held_by) return '—';
  const link = h('a', { href: limitHref(j.held_by) }, j.held_by);
  if (j.status !== 'pending') return link;
  return [link, h('span', { class: 'hint' }, ' holds it now; it goes at ' + utc(j.next_attempt_at))];
}

export function render(main, ctx, params, id) {
  let last = null;
  const head = h('div', {});
  const alert = h('div', {});
  const actions = h('div', { class: 'actions', id: 'actions' });
  const fields = h('div', {});
  const rest = h('div', {});
  replace(main, h('h1', {}, 'Job ', h('span', { class: 'mono' }, id)), head, alert, actions, fields, rest);

  const act = async (what, method, path, body) => {
    try {
      await call(method, path, body);
      toast(what + ': done');
      await load(true);
    } catch (e) {
      toast(what + ' refused: ' + e.message);
    }
  };

  function showActions(j) {
    if (readOnly()) {
      replace(actions, h('p', { class: 'hint' }, 'Read-only dashboard: no actions.'));
      return;
    }
    const items = [];
    if (j.status === 'pending') {
      const input = h('input', { type: 'datetime-local', step: '1', id: 'reschedule-at' });
      items.push(
        h('div', { class: 'field' }, h('label', { for: 'reschedule-at' }, 'New due time (local)'), input),
        h(
          'button',
          {
            type: 'button',
            id: 'reschedule',
            onclick: () => {
              const at = fromLocalInput(input.value);
              if (!at) {
                toast('Pick a date and time first');
                input.focus();
                return;
              }
              act('Reschedule', 'PATCH', '/jobs/' + encodeURIComponent(id), { deliver_at: at });
            },
          },
          'Reschedule',
        ),
        h(
          'button',
          {
            type: 'button',
            id: 'run-now',
            onclick: () => act('Run now', 'POST', '/jobs/' + encodeURIComponent(id) + '/run'),
          },
          'Run now',
        ),
        h(
          'button',
          {
            type: 'button',
            class: 'danger',
            id: 'cancel',
            onclick: async () => {
              if (
                await confirmDialog('Cancel job', 'Cancel this job? It will not be published.', 'Cancel job', 'Keep it')
              ) {
                act('Cancel', 'DELETE', '/jobs/' + encodeURIComponent(id));
              }
            },
          },
          'Cancel…',
        ),
      );
    }
    if (j.status === 'failed') {
      items.push(
        h(
          'button',
          {
            type: 'button',
            id: 'retry',
            onclick: () => act('Retry', 'POST', '/jobs/' + encodeURIComponent(id) + '/retry'),
          },
          'Retry',
        ),
      );
    }
    replace(actions, items.length ? items : h('p', { class: 'hint' }, 'No action applies to a ' + j.status + ' job.'));
  }

  async function load(force) {
    let j;
    try {
      j = (await get('/jobs/' + encodeURIComponent(id))).body;
    } catch (e) {
      replace(head, h('p', { class: 'error', role: 'alert' }, e.message));
      return;
    }
    const changed = force || !last || last.updated_at !== j.updated_at || last.status !== j.status;
    last = j;
    replace(
      head,
      h('p', {}, 'Status: ', h('span', { id: 'job-status', 'aria-live': 'polite' }, statusBadge(j.status))),
    );
    if (!changed) return;
    showActions(j);
    replace(alert, callout(j));
    replace(
      fields,
      h(
        'dl',
        { class: 'fields' },
        dd('status', j.status),
        dd('source', j.source),
        j.schedule !== undefined
          ? dd('schedule', h('a', { href: '#/schedules/' + encodeURIComponent(j.schedule) }, j.schedule))
          : null,
        j.fire_at ? dd('fire_at', when(j.fire_at)) : null,
        dd('exchange', j.exchange),
        dd('routing_key', j.routing_key),
        dd('deliver_at', when(j.deliver_at)),
        dd('next_attempt_at', when(j.next_attempt_at)),
        dd('created_at', when(j.created_at)),
        dd('updated_at', when(j.updated_at)),
        dd('sent_at', when(j.sent_at)),
        j.failed_at !== undefined ? dd('failed_at', when(j.failed_at)) : null,
        dd('attempts', `${j.attempts} of ${j.max_attempts}`),
        dd('priority', j.priority ?? '—'),
        dd('held_by', heldBy(j)),
        dd('held_ms', duration(j.held_ms)),
        dd('last_error', j.last_error ?? '—'),
      ),
    );
    replace(
      rest,
      timeline(j),
      h('h2', {}, 'Headers'),
      kvTable('Headers', j.headers),
      h('h2', {}, 'Properties'),
      kvTable('Properties', j.properties),
      h('h2', {}, 'Body'),
      bodyView(j),
    );
  }
  load(true);
  ctx.every(2000, () => (last && (last.status === 'sent' || last.status === 'cancelled') ? null : load(false)));
}
