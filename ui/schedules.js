// schedules.js - recurring schedules: the list, and one schedule with its
// next runs (UTC, its time zone, the browser's), its jobs, pause/resume and
// delete.
import { get, call, query, readOnly } from './api.js';
import { h, replace, table, dd, statusBadge, when, local, utc, toast, confirmDialog } from './dom.js';

function every(ms) {
  if (ms % 86400000 === 0) return `every ${ms / 86400000} d`;
  if (ms % 3600000 === 0) return `every ${ms / 3600000} h`;
  if (ms % 60000 === 0) return `every ${ms / 60000} min`;
  if (ms % 1000 === 0) return `every ${ms / 1000} s`;
  return `every ${ms} ms`;
}
const timing = (s) => (s.cron !== undefined ? 'cron ' + s.cron : every(s.every_ms));

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
          {},
          h('td', {}, h('a', { href: '#/schedules/' + encodeURIComponent(s.name) }, s.name)),
          h('td', { class: 'mono' }, timing(s)),
          h('td', {}, s.timezone),
          h('td', {}, s.next_runs.length ? when(s.next_runs[0].utc) : '—'),
          h('td', {}, when(s.last_run_at)),
          h('td', { 'data-state': s.name }, s.state),
        ),
      );
      replace(
        list,
        rows.length
          ? table('Schedules', ['Name', 'Timing', 'Time zone', 'Next run', 'Last run', 'State'], rows)
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
    replace(
      info,
      h(
        'dl',
        { class: 'fields' },
        dd('state', h('span', { id: 'schedule-state' }, s.state)),
        dd('timing', timing(s)),
        dd('timezone', s.timezone),
        dd('paused', s.paused ? 'yes' : 'no'),
        dd('start_at', when(s.start_at)),
        dd('end_at', when(s.end_at)),
        dd('misfire_grace_ms', String(s.misfire_grace_ms)),
        dd('dst', `skipped: ${s.dst.skipped}, repeated: ${s.dst.repeated}`),
        dd('exchange', s.job.exchange),
        dd('routing_key', s.job.routing_key),
        dd('last_run_at', when(s.last_run_at)),
        dd(
          'last_job_id',
          s.last_job_id ? h('a', { href: '#/jobs/' + encodeURIComponent(s.last_job_id) }, s.last_job_id) : '—',
        ),
        dd('generation', String(s.generation)),
        dd('created_at', when(s.created_at)),
        dd('updated_at', when(s.updated_at)),
      ),
    );
    replace(
      runs,
      s.next_runs.length
        ? table(
            'Next runs',
            ['UTC', 'In ' + s.timezone, 'Your local time'],
            s.next_runs.map((r) =>
              h(
                'tr',
                {},
                h('td', { class: 'mono' }, utc(r.utc)),
                h('td', { class: 'mono' }, r.local),
                h('td', {}, local(r.utc)),
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
      const { body } = await get('/jobs' + query({ schedule: name, limit: 20 }));
      replace(
        jobs,
        body.jobs.length
          ? table(
              'Jobs of this schedule',
              ['Id', 'Status', 'Due'],
              body.jobs.map((j) =>
                h(
                  'tr',
                  {},
                  h('td', { class: 'mono' }, h('a', { href: '#/jobs/' + encodeURIComponent(j.id) }, j.id)),
                  h('td', {}, statusBadge(j.status)),
                  h('td', {}, when(j.deliver_at)),
                ),
              ),
            )
          : h('p', {}, 'No job yet.'),
        h('p', {}, h('a', { href: '#/jobs' + query({ schedule: name }) }, 'All its jobs')),
      );
    } catch (e) {
      replace(jobs, h('p', { class: 'error' }, e.message));
    }
  }
  load();
  ctx.every(5000, load);
}
