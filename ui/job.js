// job.js - one job: every field, the body shown safely (JSON pretty-printed,
// text as text, binary as hex and base64), its actions, live status.
import { get, call, readOnly } from './api.js';
import { h, replace, table, dd, duration, statusBadge, when, utc, toast, confirmDialog } from './dom.js';
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
      h('p', {}, `Binary, ${bytes.length} bytes`),
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
  const actions = h('div', { class: 'actions', id: 'actions' });
  const fields = h('div', {});
  const rest = h('div', {});
  replace(main, h('h1', {}, 'Job ', h('span', { class: 'mono' }, id)), head, actions, fields, rest);

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
              if (await confirmDialog('Cancel job', 'Cancel this job? It will not be published.', 'Cancel job')) {
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
        dd('attempts', `${j.attempts} of ${j.max_attempts}`),
        dd('priority', j.priority ?? '—'),
        dd('held_by', heldBy(j)),
        dd('held_ms', duration(j.held_ms)),
        dd('last_error', j.last_error ?? '—'),
      ),
    );
    replace(
      rest,
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
