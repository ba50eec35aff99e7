// app.js - the dashboard's entry: loads /ui/config.json (asking for the
// token if the service needs one), then routes #/... to a page. Each page
// renders into <main> and registers its live refreshes with ctx.every,
// cleared when the route changes.
import { loadConfig, config, forgetToken } from './api.js';
import { h, replace } from './dom.js';
import * as overview from './overview.js';
import * as jobs from './jobs.js';
import * as job from './job.js';
import * as schedules from './schedules.js';
import * as limits from './limits.js';
import * as about from './about.js';
import * as banner from './banner.js';

const main = document.getElementById('main');
let timers = [];
let generation = 0;

function route() {
  for (const t of timers) clearInterval(t);
  timers = [];
  const gen = ++generation;
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, qs] = hash.split('?', 2);
  const params = new URLSearchParams(qs || '');
  const parts = path
    .split('/')
    .filter(Boolean)
    .map((p) => {
      try {
        return decodeURIComponent(p);
      } catch {
        return p;
      }
    });
  // A refresh runs only while its page is shown, and never twice at once.
  const ctx = {
    every(ms, fn) {
      let busy = false;
      timers.push(
        setInterval(async () => {
          if (busy || gen !== generation || document.hidden) return;
          busy = true;
          try {
            await fn();
          } finally {
            busy = false;
          }
        }, ms),
      );
    },
  };
  let name = 'overview',
    title = 'Overview';
  if (parts[0] === 'jobs' && parts.length === 2) {
    name = 'jobs';
    title = 'Job';
    job.render(main, ctx, params, parts[1]);
  } else if (parts[0] === 'jobs') {
    name = 'jobs';
    title = 'Jobs';
    jobs.render(main, ctx, params);
  } else if (parts[0] === 'schedules' && parts.length === 2) {
    name = 'schedules';
    title = 'Schedule';
    schedules.renderOne(main, ctx, params, parts[1]);
  } else if (parts[0] === 'schedules') {
    name = 'schedules';
    title = 'Schedules';
    schedules.renderList(main, ctx, params);
  } else if (parts[0] === 'limits' && parts.length === 2) {
    name = 'limits';
    title = 'Limit';
    limits.renderOne(main, ctx, params, parts[1]);
  } else if (parts[0] === 'limits') {
    name = 'limits';
    title = 'Limits';
    limits.renderList(main, ctx, params);
  } else if (parts[0] === 'about') {
    name = 'about';
    title = 'About';
    about.render(main);
  } else overview.render(main, ctx);
  document.title = title + ' · rmq-scheduler';
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.route === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

async function start() {
  try {
    await loadConfig();
  } catch (e) {
    replace(
      main,
      h('h1', {}, 'rmq-scheduler'),
      h('p', { class: 'error', role: 'alert' }, 'Cannot load the dashboard: ' + e.message),
    );
    return;
  }
  const mode = document.getElementById('mode');
  mode.textContent = config.mode === 'on' ? 'v' + config.version : 'read-only · v' + config.version;
  window.addEventListener('hashchange', () => {
    route();
    main.focus({ preventScroll: true });
  });
  if (config.token_required) {
    const forget = document.getElementById('forget-token');
    forget.hidden = false;
    forget.addEventListener('click', () => {
      forgetToken();
      location.reload();
    });
  }
  document.addEventListener('keydown', shortcut);
  route();
  banner.start(document.getElementById('banner'));
  document.body.dataset.ready = 'true';
}

// Keyboard shortcuts (the list: "?"): g then o/j/s/l/a goes to a page, "/"
// to the Jobs page's filter. Never while typing in a field, with a
// modifier, or over a dialog.
const GO = { o: '#/', j: '#/jobs', s: '#/schedules', l: '#/limits', a: '#/about' };
let gAt = 0;
function shortcut(e) {
  if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return;
  const t = e.target;
  if (t instanceof Element && t.closest('input, textarea, select, [contenteditable], dialog')) return;
  if (document.querySelector('dialog[open]')) return;
  if (gAt && Date.now() - gAt < 1500 && GO[e.key]) {
    gAt = 0;
    e.preventDefault();
    location.hash = GO[e.key];
    return;
  }
  gAt = e.key === 'g' ? Date.now() : 0;
  if (e.key === '?') {
    e.preventDefault();
    document.getElementById('keys-dialog').showModal();
    document.getElementById('keys-close').focus();
  } else if (e.key === '/') {
    e.preventDefault();
    if (/^#\/jobs(\?|$)/.test(location.hash)) focusSearch();
    else {
      location.hash = '#/jobs';
      window.addEventListener('hashchange', () => setTimeout(focusSearch), { once: true });
    }
  }
}

function focusSearch() {
  const toggle = document.getElementById('filter-toggle');
  if (toggle && toggle.getAttribute('aria-expanded') !== 'true') toggle.click();
  document.getElementById('f-q')?.focus();
}

start();
