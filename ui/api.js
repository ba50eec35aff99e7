// api.js - every call the dashboard makes, to this origin only.
//
// The API token, when the service needs one, is asked for in a dialog and
// kept in this module's variable; with "Remember for this tab" (on by
// default) also in sessionStorage, so a reload of the tab (or a tab it
// opens) does not ask again. Never a cookie, a URL or localStorage. A 401
// forgets it and asks again; "Forget token" forgets it and reloads.

const KEY = 'rmqs-api-token';
function stored() {
  try {
    return sessionStorage.getItem(KEY);
  } catch {
    return null; // storage refused: memory only
  }
}
function keep(t) {
  try {
    if (t) sessionStorage.setItem(KEY, t);
    else sessionStorage.removeItem(KEY);
  } catch {
    /* memory only */
  }
}

let token = stored();
let asking = null;
export let config = null;

export function forgetToken() {
  token = null;
  keep(null);
}

function askToken(message) {
  if (asking) return asking;
  const d = document.getElementById('token-dialog');
  const form = document.getElementById('token-form');
  const input = document.getElementById('token-input');
  const remember = document.getElementById('token-remember');
  document.getElementById('token-message').textContent = message;
  input.value = '';
  asking = new Promise((resolve) => {
    const onSubmit = (e) => {
      e.preventDefault();
      if (!input.value) return;
      form.removeEventListener('submit', onSubmit);
      token = input.value;
      keep(remember.checked ? token : null);
      input.value = '';
      d.close();
      asking = null;
      resolve();
    };
    form.addEventListener('submit', onSubmit);
    // The page is of no use without it: Escape does not dismiss it.
    d.addEventListener('cancel', (e) => e.preventDefault());
    d.showModal();
    input.focus();
  });
  return asking;
}

const ASK = 'This service needs its API token.';
const AGAIN = 'That token was refused. Enter the API token again.';

// A refused token (used: the one the request carried) is forgotten, in
// memory and in the tab, before asking again; a request that carried an
// older one only tries again with the current one.
function refused(used) {
  if (token !== used) return asking || Promise.resolve();
  forgetToken();
  return askToken(used !== null ? AGAIN : ASK);
}

export class ApiError extends Error {
  constructor(status, body) {
    const e = body && body.error ? body.error : {};
    super(e.message || 'HTTP ' + status);
    this.status = status;
    this.code = e.code || 'http_' + status;
    this.field = e.field;
  }
}

// fetch path (same origin) as JSON. Resolves {status, body}; throws
// ApiError for 4xx/5xx unless ok lists the status.
export async function call(method, path, body, ok = []) {
  for (;;) {
    const used = token;
    const headers = { Accept: 'application/json' };
    if (token) headers.Authorization = 'Bearer ' + token;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
      redirect: 'error',
    });
    if (resp.status === 401) {
      await refused(used);
      continue;
    }
    const text = await resp.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = text;
      }
    }
    if (resp.status >= 400 && !ok.includes(resp.status)) throw new ApiError(resp.status, data);
    return { status: resp.status, body: data };
  }
}

export const get = (path, ok) => call('GET', path, undefined, ok);

export async function text(path) {
  for (;;) {
    const used = token;
    const headers = {};
    if (token) headers.Authorization = 'Bearer ' + token;
    const resp = await fetch(path, { headers, credentials: 'omit', cache: 'no-store' });
    if (resp.status === 401) {
      await refused(used);
      continue;
    }
    if (!resp.ok) throw new ApiError(resp.status, null);
    return resp.text();
  }
}

// /ui/config.json: mode, version, whether a token is needed; with the
// token, the settings too. Asks for the token first if it is needed.
export async function loadConfig() {
  let c = (await get('/ui/config.json')).body;
  if (c.token_required && !token) {
    await askToken(ASK);
  }
  if (c.token_required) {
    // Check the token on a call that needs it (asks again while wrong).
    await get('/readyz', [503]);
    c = (await get('/ui/config.json')).body;
  }
  config = c;
  return c;
}

export const readOnly = () => !config || config.mode !== 'on';

// A query string of the non-empty values of obj.
export function query(obj) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(obj)) if (v !== undefined && v !== null && v !== '') p.set(k, v);
  const s = p.toString();
  return s ? '?' + s : '';
}
