// schedules.js - recurring schedules: the list, and one schedule with its
// next runs (in its own time zone first, then UTC and the browser's), the
// job each run creates, its jobs, pause/resume and delete. Values in words:
// 60000 ms is "1 min", null is "—", an empty list is "none".
import { get, call, query, readOnly } from './api.js';
import { hintFor } from './job.js';
import { h, replace, table, dd, statusBadge, when, local, utc, toast, confirmDialog, humanMs, num } from './dom.js';

function every(ms) {
  if (ms % 86400000 === 0) return `every ${ms / 86400000} d`;
  if (ms % 3600000 === 0) return `every ${ms / 3600000} h`;
  if (ms % 60000 === 0) return `every ${ms / 60000} min`;
  if (ms % 1000 === 0) return `every ${ms / 1000} s`;
  return `every ${ms} ms`;
}
const timing = (s) => (s.cron !== undefined ? 'cron ' + s.cron : every(s.every_ms));

// A next run's local time ("2026-12-06T08:00:00.000+01:00") as the
// schedule's zone reads it: "2026-12-06 08:00 Europe/Berlin" (seconds only
// when not zero), the offset in the title.
export function zoned(local, tz) {
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(:\d{2})\.\d+([+-]\d{2}:\d{2})$/.exec(local || '');
  if (!m) return local || '\u2014';
  return `${m[1]} ${m[2]}${m[3] === ':00' ? '' : m[3]} ${tz}`;
}

// A fire time: in the schedule's zone, then UTC and the browser's time,
// smaller.
function runAt(r, tz) {
  return h(
    'span',
    { class: 'run' },
    h('time', { datetime: r.utc, class: 'zoned', title: 'UTC offset ' + r.local.slice(-6) }, zoned(r.local, tz)),
    h('br'),
    h('span', { class: 'hint' }, utc(r.utc) + ' \u00b7 local: ' + local(r.utc)),
  );
}

// The state as a badge: paused and ended do not look like active.
const stateBadge = (st) => h('span', { class: 'state sc-' + (/^[a-z]+$/.test(st) ? st : 'x') }, st);

// A schedule whose latest finished runs failed: marked beside its state.
const streak = (s) => s.failure_streak > 0;
const streakWords = (s) =>
  `${s.failure_streak_capped ? '100 or more' : num(s.failure_streak)} failed ${s.failure_streak === 1 ? 'run' : 'runs'} in a row`;
const failingBadge = (s) => (streak(s) ? [' ', h('span', { class: 'badge failing' }, 'failing')] : null);

// The last run's outcome: its status, linked to its job, and its error.
function lastRun(s) {
  const r = s.last_run;
  if (!r) return '\u2014';
  return h(
    'span',
    { class: 'last-run' },
    h('a', { href: '#/jobs/' + encodeURIComponent(r.job_id) }, statusBadge(r.status)),
    r.fire_time ? [' ', h('span', { class: 'hint' }, utc(r.fire_time))] : null,
  );
}

// A value in words: null "—", [] and {} "none".
function words(v) {
  if (v === null || v === undefined) return '\u2014';
  if (Array.isArray(v)) return v.length ? v.join(', ') : 'none';
  if (typeof v === 'object') return Object.keys(v).length ? JSON.stringify(v) : 'none';
  if (typeof v === 'number') return num(v);
  return String(v);
}

const PREVIEW = 300;
function bodyPreview(job) {
  if (job.body_base64 !== undefined) {
    let n = 0;
    try {
      n = atob(job.body_base64).length;
    } catch {
      /* length unknown */
    }
    return h('span', { id: 'template-body' }, `binary, ${num(n)} bytes`);
  }
  const b = typeof job.body === 'string' ? job.body : JSON.stringify(job.body);
  if (b === undefined || b === '') return h('span', { id: 'template-body' }, 'empty');
  const cut = b.length > PREVIEW;
  return [
    h('pre', { id: 'template-body' }, cut ? b.slice(0, PREVIEW) + '\u2026' : b),
    cut ? h('span', { class: 'hint' }, `first ${PREVIEW} of ${num(b.length)} characters`) : null,
  ];
}

function kv(id, obj) {
  const entries = Object.entries(obj || {});
  if (!entries.length) return h('span', { id }, 'none');
  return h(
    'dl',
    { class: 'fields kv', id },
    entries.map(([k, v]) => [
      h('dt', { class: 'mono' }, k),
      h('dd', { class: 'mono' }, typeof v === 'string' ? v : JSON.stringify(v)),
    ]),
  );
}

export function renderList(main, ctx, params) {
  const after = params.get('after') || '';
  const list = h('div', {}, 'Loading…');
  const pager = h('div', { class: 'buttons' });
  replace(main, h('h1', {}, 'Schedules'), list, pager);
  async function load() {
    try {
      const { body } = await get('/schedules' + query({ limit: 100, after }));
      const rows = body.schedules.map((s) =>
        h(
          'tr',
          {
            class: 'sched-' + (/^[a-z]+$/.test(s.state) ? s.state : 'x') + (streak(s) ? ' sched-failing' : ''),
            'data-schedule': s.name,
          },
          h('td', {}, h('a', { href: '#/schedules/' + encodeURIComponent(s.name) }, s.name)),
          h('td', { 'data-state': s.name }, stateBadge(s.state), failingBadge(s)),
          h('td', { class: 'mono' }, timing(s)),
          h('td', {}, s.timezone),
          h(
            'td',
            { class: 'next-run' },
            s.next_runs.length && s.state === 'active' ? runAt(s.next_runs[0], s.timezone) : '\u2014',
          ),
          h('td', { class: 'last' }, lastRun(s), streak(s) ? h('div', { class: 'error' }, streakWords(s)) : null),
        ),
      );
      replace(
        list,
        rows.length
          ? table(
              'Schedules',
              ['Name', 'State', 'Timing', 'Time zone', 'Next run (its zone first)', 'Last run (outcome)'],
              rows,
              'as-cards',
            )
          : h('p', {}, 'No schedule yet (PUT /schedules/{name}).'),
      );
      replace(pager, body.next ? h('a', { href: '#/schedules' + query({ after: body.next }) }, 'Next page') : null);
    } catch (e) {
      replace(list, h('p', { class: 'error', role: 'alert' }, e.message));
    }
  }
  load();
  ctx.every(5000, load);
}

export function renderOne(main, ctx, params, name) {
  const info = h('div', {});
  const actions = h('div', { class: 'actions', id: 'actions' });
  const runs = h('div', {});
  const jobs = h('div', {});
  replace(
    main,
    h('h1', {}, 'Schedule ', h('span', { class: 'mono' }, name)),
    actions,
    info,
    h('h2', {}, 'Next runs'),
    runs,
    h('h2', {}, 'Its jobs'),
    jobs,
  );
  const path = '/schedules/' + encodeURIComponent(name);

  async function load() {
    let s;
    try {
      s = (await get(path + '?count=10')).body;
    } catch (e) {
      replace(info, h('p', { class: 'error', role: 'alert' }, e.message));
      replace(actions);
      return;
    }
    const jt = s.job || {};
    const lr = s.last_run;
    replace(
      info,
      streak(s)
        ? h(
            'section',
            { class: 'callout', id: 'failing-callout', 'aria-labelledby': 'h-failing' },
            h('h2', { id: 'h-failing' }, 'Failing: ' + streakWords(s)),
            lr && lr.error ? h('p', { class: 'mono', id: 'failing-error' }, lr.error) : null,
            lr && lr.error && hintFor(lr.error)
              ? h('p', {}, h('strong', {}, 'What it usually means: '), hintFor(lr.error))
              : null,
          )
        : null,
      s.paused
        ? h(
            'p',
            { class: 'notice', id: 'paused-notice', role: 'status' },
            'Paused: this schedule creates no runs until it is resumed.',
          )
        : null,
      h(
        'dl',
        { class: 'fields' },
        dd('state', h('span', { id: 'schedule-state' }, stateBadge(s.state), failingBadge(s))),
        dd('last run', lastRun(s)),
        dd('failure streak', streak(s) ? h('span', { class: 'error' }, streakWords(s)) : 'none'),
        dd('timing', timing(s)),
        dd('timezone', s.timezone),
        dd('paused', s.paused ? 'yes' : 'no'),
        dd('start_at', when(s.start_at)),
        dd('end_at', when(s.end_at)),
        dd('misfire_grace_ms', humanMs(s.misfire_grace_ms)),
        dd('dst', `skipped: ${s.dst.skipped}, repeated: ${s.dst.repeated}`),
        dd('last_run_at', when(s.last_run_at)),
        dd(
          'last_job_id',
          s.last_job_id ? h('a', { href: '#/jobs/' + encodeURIComponent(s.last_job_id) }, s.last_job_id) : '—',
        ),
        dd('generation', String(s.generation)),
        dd('created_at', when(s.created_at)),
        dd('updated_at', when(s.updated_at)),
      ),
      h('h2', {}, 'The job each run creates'),
      h(
        'dl',
        { class: 'fields', id: 'template' },
        dd('exchange', jt.exchange === '' ? '(default exchange)' : jt.exchange),
        dd('routing_key', jt.routing_key),
        dd('headers', kv('template-headers', jt.headers)),
        dd('properties', kv('template-properties', jt.properties)),
        dd('max_attempts', words(jt.max_attempts)),
        dd('body', bodyPreview(jt)),
      ),
    );
    replace(
      runs,
      s.next_runs.length
        ? table(
            'Next runs',
            ['In ' + s.timezone, 'UTC', 'Your local time'],
            s.next_runs.map((r) =>
              h(
                'tr',
                {},
                h(
                  'td',
                  { class: 'mono zoned' },
                  h('time', { datetime: r.utc, title: r.local }, zoned(r.local, s.timezone)),
                ),
                h('td', { class: 'mono hint' }, utc(r.utc)),
                h('td', { class: 'hint' }, local(r.utc)),
              ),
            ),
          )
        : h('p', {}, s.paused ? 'Paused.' : 'No run is left.'),
    );
    if (readOnly()) {
      replace(actions, h('p', { class: 'hint' }, 'Read-only dashboard: no actions.'));
    } else {
      replace(
        actions,
        h(
          'button',
          {
            type: 'button',
            id: 'run-schedule-now',
            onclick: async () => {
              try {
                const j = (await call('POST', path + '/run')).body;
                toast('Run created: ' + j.id);
                load();
              } catch (e) {
                toast('Refused: ' + e.message);
              }
            },
          },
          'Run now',
        ),
        h(
          'button',
          {
            type: 'button',
            id: 'pause',
            onclick: async () => {
              try {
                await call('PATCH', path, { paused: !s.paused });
                toast(s.paused ? 'Resumed' : 'Paused');
                load();
              } catch (e) {
                toast('Refused: ' + e.message);
              }
            },
          },
          s.paused ? 'Resume' : 'Pause',
        ),
        h(
          'button',
          {
            type: 'button',
            class: 'danger',
            id: 'delete',
            onclick: async () => {
              if (
                !(await confirmDialog(
                  'Delete schedule',
                  `Delete the schedule ${name}? Its pending runs are cancelled.`,
                  'Delete',
                ))
              )
                return;
              try {
                await call('DELETE', path);
                toast('Deleted ' + name);
                location.hash = '#/schedules';
              } catch (e) {
                toast('Refused: ' + e.message);
              }
            },
          },
          'Delete…',
        ),
      );
    }
    try {
      // Its latest runs first: the newest due time (GET /jobs?order=-due).
      const { body } = await get('/jobs' + query({ schedule: name, limit: 20, order: '-due' }));
      replace(
        jobs,
        body.jobs.length
          ? table(
              'Jobs of this schedule, latest first',
              ['Id', 'Status', 'Due', 'Error'],
              body.jobs.map((j) =>
                h(
                  'tr',
                  {},
                  h('td', { class: 'mono' }, h('a', { href: '#/jobs/' + encodeURIComponent(j.id) }, j.id)),
                  h('td', {}, statusBadge(j.status)),
                  h('td', {}, when(j.deliver_at)),
                  h('td', { class: 'mono' }, j.last_error || '\u2014'),
                ),
              ),
            )
          : h('p', {}, 'No job yet.'),
        h('p', {}, h('a', { href: '#/jobs' + query({ schedule: name, order: '-due' }) }, 'All its jobs')),
      );
    } catch (e) {
      replace(jobs, h('p', { class: 'error' }, e.message));
    }
  }
  load();
  ctx.every(5000, load);
}
