// banner.js - the trouble banner above every page: while the broker or the
// database is down (or the broker blocks the connection), or jobs are
// overdue, or the service cannot be reached at all, it says so at the top
// of whatever page is open, with since when, the error and how many jobs
// are late. It reads GET /status every few seconds; a page of its own would
// be found only by someone who already knows something is wrong.
import { get } from './api.js';
import { h, replace, duration, utc, num, plural } from './dom.js';

const EVERY_MS = 5000;
const WHAT = { broker: 'Broker', database: 'Database' };
const STATE = { down: 'down', blocked: 'blocking publishes (connection.blocked)', full: 'full' };

// How long ago ts was, in words ("3 min 5 s ago").
const ago = (ts, now) => duration(Math.max(0, now - Date.parse(ts))) + ' ago';

// The banner's lines for a /status answer s (empty: no trouble). Overdue
// jobs alone raise no banner (a limit holding jobs back makes them late on
// purpose; the oldest overdue job's age is an alert rule's business): they
// are counted while the broker or the database is away.
export function troubleLines(s, now = Date.now()) {
  const lines = [];
  if (!s.trouble) return lines;
  for (const part of ['broker', 'database']) {
    const p = s[part];
    if (!p || p.state === 'up') continue;
    lines.push(
      h(
        'p',
        { 'data-trouble': part },
        h('strong', {}, `${WHAT[part]} ${STATE[p.state] || p.state}`),
        p.since ? ` since ${utc(p.since)} (${ago(p.since, now)})` : null,
        p.last_error ? [': ', h('span', { class: 'mono' }, p.last_error)] : null,
      ),
    );
  }
  const o = s.overdue;
  if (o && o.count > 0) {
    const cut = new Date(now - 1000).toISOString();
    lines.push(
      h(
        'p',
        { 'data-trouble': 'overdue' },
        h(
          'a',
          { href: '#/jobs?status=pending&deliver_to=' + encodeURIComponent(cut) },
          h('strong', {}, `${num(o.count)}${o.capped ? ' or more' : ''} ${plural(o.count, 'job', 'jobs')} overdue`),
        ),
        o.oldest_age_s != null ? ` (the oldest by ${duration(Math.round(o.oldest_age_s * 1000))})` : null,
      ),
    );
  }
  return lines;
}

export function start(el) {
  let busy = false;
  async function check() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const s = (await get('/status', [503])).body;
      const lines = s && typeof s === 'object' ? troubleLines(s) : [];
      el.hidden = lines.length === 0;
      replace(el, lines);
    } catch (e) {
      // 404: a service older than the banner; anything else is trouble.
      el.hidden = e.status === 404;
      replace(el, e.status === 404 ? [] : h('p', {}, h('strong', {}, 'Cannot reach the service: '), e.message));
    } finally {
      busy = false;
    }
  }
  check();
  setInterval(check, EVERY_MS);
  document.addEventListener('visibilitychange', check);
}
