// dom.js - building the page from data as text, never as HTML.
//
// h(tag, attrs, ...children): children that are strings or numbers become
// text nodes (textContent semantics), so a job's body, headers, names or an
// error message can never become markup. attrs are set as properties or
// attributes the code chose; an href is only ever one built here (#/...).

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = String(v);
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'href') el.setAttribute('href', safeHref(v));
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// Links stay inside the dashboard: only "#/..." routes.
function safeHref(v) {
  const s = String(v);
  return s.startsWith('#/') ? s : '#/';
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

// A table in a focusable, labelled scrolling region (keyboard users can
// scroll it; screen readers name it). Each cell carries its column's name
// (data-label): on a narrow screen style.css lays the rows out as cards and
// shows that name beside the value. head: strings, or nodes for a column
// whose header is a control (its data-label is then empty).
export function table(label, head, rows, cls) {
  const names = head.map((t) => (typeof t === 'string' ? t : ''));
  for (const tr of rows.flat()) {
    if (!(tr instanceof Element)) continue;
    [...tr.children].forEach((td, i) => {
      if (names[i] && !td.hasAttribute('data-label')) td.setAttribute('data-label', names[i]);
    });
  }
  return h(
    'div',
    { class: 'table-wrap' + (cls ? ' ' + cls : ''), tabindex: '0', role: 'region', 'aria-label': label },
    h(
      'table',
      {},
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          head.map((t) => h('th', { scope: 'col' }, t)),
        ),
      ),
      h('tbody', {}, rows),
    ),
  );
}

// A number with thousands separators, the same on every page: 1,612.
export const num = (n) => (typeof n === 'number' && isFinite(n) ? n.toLocaleString('en') : String(n ?? '—'));

// "1 matching job", "2 matching jobs" (word is the singular).
export const plural = (n, word, words) => (n === 1 ? word : words || word + 's');

export function field(id, label, input, hint) {
  input.id = id;
  if (hint) input.setAttribute('aria-describedby', id + '-hint');
  return h(
    'div',
    { class: 'field' },
    h('label', { for: id }, label),
    input,
    hint ? h('span', { class: 'hint', id: id + '-hint' }, hint) : null,
  );
}

// A term and its value in a <dl class="fields">; data-field names it for
// tests and styles.
export const dd = (k, v) => [h('dt', {}, k), h('dd', { 'data-field': k }, v)];

// Marks a form control as refused with message: aria-invalid, and the
// message beside it, read with the control (aria-describedby).
export function fieldError(input, message) {
  const id = input.id + '-error';
  let msg = document.getElementById(id);
  if (!msg) {
    msg = h('span', { class: 'field-error', id });
    input.closest('.field').appendChild(msg);
    const by = input.getAttribute('aria-describedby');
    input.setAttribute('aria-describedby', by ? by + ' ' + id : id);
  }
  msg.textContent = message;
  input.setAttribute('aria-invalid', 'true');
}

// Undoes every fieldError under root.
export function clearFieldErrors(root) {
  for (const input of root.querySelectorAll('[aria-invalid="true"]')) {
    input.removeAttribute('aria-invalid');
    const id = input.id + '-error';
    const by = (input.getAttribute('aria-describedby') || '').split(' ').filter((x) => x && x !== id);
    if (by.length) input.setAttribute('aria-describedby', by.join(' '));
    else input.removeAttribute('aria-describedby');
  }
  for (const m of root.querySelectorAll('.field-error')) m.remove();
}

// A span of milliseconds for people: 850 ms, 12.3 s, 4 min 5 s, 2 h 3 min.
export function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 59950) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// A setting in milliseconds in words: 60000 -> "1 min", 90000 -> "1 min
// 30 s", 0 -> "0 s", null -> "—" (only the parts that are not zero).
export function humanMs(ms) {
  if (ms === null || ms === undefined) return '\u2014';
  if (ms % 1000) return num(ms) + ' ms';
  let s = ms / 1000;
  const parts = [];
  for (const [unit, n] of [
    ['d', 86400],
    ['h', 3600],
    ['min', 60],
    ['s', 1],
  ]) {
    if (s >= n) {
      parts.push(`${Math.floor(s / n)} ${unit}`);
      s %= n;
    }
  }
  return parts.length ? parts.join(' ') : '0 s';
}

export function statusBadge(s) {
  return h('span', { class: 'status st-' + (/^[a-z]+$/.test(s) ? s : 'x') }, s);
}

// "2026-12-02T13:00:00.000Z" as UTC and the browser's local time.
export function utc(ts) {
  return ts
    ? ts
        .replace('T', ' ')
        .replace(/\.\d+Z$/, 'Z')
        .replace(/Z$/, ' UTC')
    : '—';
}

export function local(ts) {
  if (!ts) return '—';
  const d = new Date(ts);
  return isNaN(d) ? ts : d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
}

export function when(ts) {
  if (!ts) return '—';
  return h(
    'span',
    {},
    h('time', { datetime: ts }, utc(ts)),
    h('br'),
    h('span', { class: 'hint' }, 'local: ' + local(ts)),
  );
}

let toastTimer;
export function toast(msg) {
  const t = document.getElementById('toast');
  t.textContent = msg;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => {
    t.textContent = '';
  }, 5000);
}

// The confirmation dialog: resolves true (yes) or false. message: text or
// nodes; noLabel names the way out ("Keep them"), so the two buttons
// cannot be taken for one another.
export function confirmDialog(title, message, yesLabel, noLabel) {
  const d = document.getElementById('confirm-dialog');
  document.getElementById('confirm-title').textContent = title;
  replace(document.getElementById('confirm-message'), message);
  const yes = document.getElementById('confirm-yes');
  yes.textContent = yesLabel || 'Confirm';
  return new Promise((resolve) => {
    const form = document.getElementById('confirm-form');
    const no = document.getElementById('confirm-no');
    no.textContent = noLabel || 'Cancel';
    const done = (v) => {
      form.removeEventListener('submit', onYes);
      no.removeEventListener('click', onNo);
      d.removeEventListener('cancel', onNo);
      if (d.open) d.close();
      resolve(v);
    };
    const onYes = (e) => {
      e.preventDefault();
      done(true);
    };
    const onNo = (e) => {
      e.preventDefault();
      done(false);
    };
    form.addEventListener('submit', onYes);
    no.addEventListener('click', onNo);
    d.addEventListener('cancel', onNo);
    d.showModal();
    no.focus();
  });
}
