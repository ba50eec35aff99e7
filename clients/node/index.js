// rmq-scheduler-client - a Node.js client of rmq-scheduler's HTTP API
// (api/openapi.yaml), with no dependencies: node:http(s) and node:crypto.
//
// schedule() batches: the calls made in one turn of the event loop (or
// within `lingerMs`), and every call made while `maxInFlight` batches are
// out, go as one POST /schedule/batch (up to `maxBatch` items or
// `maxBatchBytes`), and each caller gets its own job or its own error.
// Every call retries what is safe to retry (connection refused, a reset
// keep-alive socket, 503, 429) with capped exponential backoff and full
// jitter; scheduling carries idempotency keys so that a retry never
// creates a second job.
import http from 'node:http';
import https from 'node:https';
import crypto from 'node:crypto';

// ---------------------------------------------------------------- errors

// Every error the client throws. `status` is the HTTP status (0 when there
// was no answer), `code` the API's error code (or `timeout`, `aborted`,
// `connection` for the client's own), `field` the request member at fault,
// `errors` a batch's per-item list, `retryAfterMs` from a Retry-After header.
export class RmqsError extends Error {
  constructor(message, { status = 0, code = 'unknown', field, errors, retryAfterMs, body, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    if (field !== undefined) this.field = field;
    if (errors !== undefined) this.errors = errors;
    if (retryAfterMs !== undefined) this.retryAfterMs = retryAfterMs;
    if (body !== undefined) Object.defineProperty(this, 'body', { value: body, enumerable: false });
  }
}

// One class per `error.code` of api/openapi.yaml (ErrorDetail.code).
export class InvalidArgumentError extends RmqsError {}
export class UnauthorizedError extends RmqsError {}
export class ForbiddenError extends RmqsError {}
export class UiReadOnlyError extends RmqsError {}
export class CrossOriginError extends RmqsError {}
export class HostNotAllowedError extends RmqsError {}
export class NotFoundError extends RmqsError {}
export class MethodNotAllowedError extends RmqsError {}
export class ConflictError extends RmqsError {}
export class PayloadTooLargeError extends RmqsError {}
export class UnsupportedMediaTypeError extends RmqsError {}
export class UnavailableError extends RmqsError {}
export class StorageFullError extends RmqsError {}
export class SearchTimeoutError extends RmqsError {}
export class InternalError extends RmqsError {}
// The client's own: a request past timeoutMs, a call aborted by its
// AbortSignal (or by close()), no connection after every retry.
export class TimeoutError extends RmqsError {}
export class AbortError extends RmqsError {}
export class ConnectionError extends RmqsError {}

export const errorClasses = Object.freeze({
  invalid_argument: InvalidArgumentError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  ui_read_only: UiReadOnlyError,
  cross_origin: CrossOriginError,
  host_not_allowed: HostNotAllowedError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  conflict: ConflictError,
  payload_too_large: PayloadTooLargeError,
  unsupported_media_type: UnsupportedMediaTypeError,
  unavailable: UnavailableError,
  storage_full: StorageFullError,
  search_timeout: SearchTimeoutError,
  internal: InternalError,
});

// Without a recognised code (a proxy's answer, say): by HTTP status.
const byStatus = {
  400: 'invalid_argument',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  409: 'conflict',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  500: 'internal',
  503: 'unavailable',
};

function errorFromAnswer(status, body, retryAfterMs) {
  const e = body && typeof body === 'object' && body.error && typeof body.error === 'object' ? body.error : null;
  let code = e && typeof e.code === 'string' ? e.code : byStatus[status] || 'unknown';
  const Cls = errorClasses[code] || RmqsError;
  const message = (e && e.message) || (typeof body === 'string' && body ? body.slice(0, 300) : `HTTP ${status}`);
  return new Cls(message, {
    status,
    code,
    field: e && e.field !== undefined ? e.field : undefined,
    errors: body && Array.isArray(body.errors) ? body.errors : undefined,
    retryAfterMs,
    body,
  });
}

// ---------------------------------------------------------------- helpers

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(abortError(signal));
    const t = setTimeout(done, ms);
    function done() {
      if (signal) signal.removeEventListener('abort', onAbort);
      resolve();
    }
    function onAbort() {
      clearTimeout(t);
      reject(abortError(signal));
    }
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
  });

function abortError(signal) {
  const r = signal && signal.reason;
  if (r instanceof RmqsError) return r;
  return new AbortError('the call was aborted', { code: 'aborted', cause: r });
}

function parseRetryAfter(v) {
  if (v === undefined || v === null || v === '') return undefined;
  if (/^\s*\d+\s*$/.test(v)) return Number(v) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(0, t - Date.now());
}

// Connection errors: nothing was answered. `connect` ones mean nothing was
// sent either, so they are safe to retry for every request.
const CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EADDRNOTAVAIL',
]);
const RESET_CODES = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED']);

function isoOf(v) {
  return v instanceof Date ? v.toISOString() : v;
}

function queryString(params) {
  const parts = [];
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null) continue;
    parts.push(encodeURIComponent(k) + '=' + encodeURIComponent(String(isoOf(v))));
  }
  return parts.length ? '?' + parts.join('&') : '';
}

function filterBody(filter) {
  const out = {};
  for (const [k, v] of Object.entries(filter || {})) if (v !== undefined && v !== null) out[k] = String(isoOf(v));
  return out;
}

const seg = (s) => encodeURIComponent(String(s));
const newKey = () => crypto.randomUUID();

function whenBody({ deliverAt, delayMs } = {}) {
  const b = {};
  if (deliverAt !== undefined) b.deliver_at = isoOf(deliverAt);
  if (delayMs !== undefined) b.delay_ms = delayMs;
  return b;
}

// ---------------------------------------------------------------- client

const MAX_SERVER_BATCH = 1000;

export class Client {
  constructor({
    url = 'http://127.0.0.1:8080',
    token,
    timeoutMs = 10000,
    lingerMs = 0,
    maxInFlight = 8,
    maxBatch = 1000,
    maxBatchBytes = 900 * 1024,
    maxOutstanding = 10000,
    retry = {},
    agent,
    headers = {},
  } = {}) {
    this.url = new URL(url);
    if (this.url.protocol !== 'http:' && this.url.protocol !== 'https:')
      throw new TypeError('url: http: or https: only');
    this.base = this.url.pathname.replace(/\/+$/, '');
    this.token = token;
    this.timeoutMs = timeoutMs;
    this.lingerMs = lingerMs;
    this.maxInFlight = Math.max(1, maxInFlight);
    this.maxBatch = Math.max(1, Math.min(maxBatch, MAX_SERVER_BATCH));
    this.maxBatchBytes = maxBatchBytes;
    this.maxOutstanding = Math.max(1, maxOutstanding);
    this.retryOpts = { attempts: 5, baseMs: 50, capMs: 2000, ...retry };
    this.extraHeaders = headers;
    this.mod = this.url.protocol === 'https:' ? https : http;
    this.ownAgent = !agent;
    this.agent = agent || new this.mod.Agent({ keepAlive: true, maxSockets: 32 });
    // Batching state.
    this.buf = []; // items waiting for the next batch
    this.bufBytes = 0;
    this.timer = null;
    this.outstanding = 0; // schedule() calls accepted and not settled
    this.waiters = []; // schedule() calls waiting for room
    this.inflight = new Set(); // batch promises
    this.closed = false;
    this.retries = 0; // tries repeated, in all (for monitoring)
  }

  // ------------------------------------------------------------ transport

  // One API call: the answer's parsed body (or undefined for 204), or a
  // typed error. `safe`: the request may be repeated after a connection
  // reset without changing the outcome (GET, PUT, DELETE, a keyed POST).
  async request(method, path, { query, body, rawBody, headers = {}, signal, safe, ok } = {}) {
    const r = await this.requestFull(method, path, { query, body, rawBody, headers, signal, safe, ok });
    return r.body;
  }

  async requestFull(method, path, { query, body, rawBody, headers = {}, signal, safe, ok } = {}) {
    if (safe === undefined) safe = method === 'GET' || method === 'PUT' || method === 'DELETE';
    const payload = rawBody !== undefined ? rawBody : body === undefined ? undefined : JSON.stringify(body);
    const { attempts, baseMs, capMs } = this.retryOpts;
    const full = this.base + path + queryString(query);
    for (let attempt = 1; ; attempt++) {
      let res;
      try {
        res = await this._once(method, full, payload, headers, signal);
      } catch (err) {
        if (err instanceof TimeoutError || err instanceof AbortError) throw err;
        const retryable = CONNECT_CODES.has(err.code) || ((safe || err.reusedSocket) && isResetish(err));
        if (!retryable || attempt >= attempts) {
          throw new ConnectionError(`${method} ${path}: ${err.message}`, { code: 'connection', cause: err });
        }
        this.retries++;
        await sleep(backoff(attempt, baseMs, capMs), signal);
        continue;
      }
      if (res.status >= 200 && res.status < 300 && (!ok || ok.includes(res.status))) return res;
      const retryAfterMs = parseRetryAfter(res.headers['retry-after']);
      const err = errorFromAnswer(res.status, res.body, retryAfterMs);
      if ((res.status === 503 || res.status === 429) && attempt < attempts) {
        this.retries++;
        await sleep(retryAfterMs !== undefined ? retryAfterMs : backoff(attempt, baseMs, capMs), signal);
        continue;
      }
      throw err;
    }
  }

  _once(method, path, payload, extra, signal) {
    return new Promise((resolve, reject) => {
      if (signal && signal.aborted) return reject(abortError(signal));
      const headers = { Accept: 'application/json', ...this.extraHeaders, ...extra };
      if (this.token) headers.Authorization = `Bearer ${this.token}`;
      if (payload !== undefined) {
        if (!Object.keys(headers).some((k) => k.toLowerCase() === 'content-type')) {
          headers['Content-Type'] = 'application/json';
        }
        headers['Content-Length'] = Buffer.byteLength(payload);
      }
      const req = this.mod.request({
        protocol: this.url.protocol,
        hostname: this.url.hostname,
        port: this.url.port || undefined,
        method,
        path,
        headers,
        agent: this.agent,
      });
      let settled = false;
      const finish = (fn, v) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (signal) signal.removeEventListener('abort', onAbort);
        fn(v);
      };
      const timer = setTimeout(() => {
        const e = new TimeoutError(`${method} ${path}: no answer within ${this.timeoutMs} ms`, { code: 'timeout' });
        req.destroy(e);
        finish(reject, e);
      }, this.timeoutMs);
      const onAbort = () => {
        const e = abortError(signal);
        req.destroy(e);
        finish(reject, e);
      };
      if (signal) signal.addEventListener('abort', onAbort, { once: true });
      req.on('error', (err) => {
        if (req.reusedSocket) err.reusedSocket = true;
        finish(reject, err);
      });
      req.on('response', (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('error', (err) => finish(reject, err));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body;
          if (text) {
            try {
              body = JSON.parse(text);
            } catch {
              body = text;
            }
          }
          finish(resolve, { status: res.statusCode, headers: res.headers, body });
        });
      });
      req.end(payload);
    });
  }

  // ------------------------------------------------------------ scheduling

  // Schedules one job through the batcher. Resolves to the job's
  // JobMinimal `{id, status, deliver_at}` (the batch is sent with
  // `Prefer: return=minimal`): get(id) reads the whole job.
  async schedule(job, { idempotencyKey, signal } = {}) {
    if (this.closed) throw new AbortError('the client is closed', { code: 'aborted' });
    if (!job || typeof job !== 'object' || Array.isArray(job))
      throw new TypeError('schedule(job): job must be an object');
    if (signal && signal.aborted) throw abortError(signal);
    if (this.outstanding >= this.maxOutstanding || this.waiters.length) await this._waitForRoom(signal);
    else this.outstanding++;
    let item;
    const p = new Promise((resolve, reject) => {
      item = {
        resolve,
        reject,
        key: idempotencyKey || job.idempotency_key || newKey(),
        signal,
        json: '',
        bytes: 0,
        queued: true,
      };
    });
    item.json = this._itemJson(job, item.key);
    item.bytes = Buffer.byteLength(item.json) + 1;
    if (signal) {
      item.onAbort = () => {
        if (item.queued) {
          const i = this.buf.indexOf(item);
          if (i >= 0) {
            this.buf.splice(i, 1);
            this.bufBytes -= item.bytes;
          }
          item.queued = false;
        }
        // Sent already: the job may be stored; this caller stops waiting.
        this._settle(item, abortError(signal), true);
      };
      signal.addEventListener('abort', item.onAbort, { once: true });
    }
    if (this.buf.length && this.bufBytes + item.bytes + 2 > this.maxBatchBytes) this._flush();
    this.buf.push(item);
    this.bufBytes += item.bytes;
    if (this.buf.length >= this.maxBatch || this.bufBytes + 2 >= this.maxBatchBytes) this._flush();
    else this._arm();
    return p;
  }

  // When the buffered calls go. With fewer than maxInFlight batches out: at
  // the next turn of the event loop, so every call this turn makes (a
  // Promise.all of many, or every caller an answer just woke) rides along,
  // and a lone caller waits for nothing; or after lingerMs, if set. With
  // maxInFlight out: when one of them ends, the buffer growing meanwhile.
  _arm() {
    if (this.timer || this.inflight.size >= this.maxInFlight) return;
    this.timer =
      this.lingerMs > 0
        ? { t: setTimeout(() => this._flush(), this.lingerMs), clear: clearTimeout }
        : { t: setImmediate(() => this._flush()), clear: clearImmediate };
  }

  _itemJson(job, key) {
    return JSON.stringify({ ...job, idempotency_key: key });
  }

  _waitForRoom(signal) {
    return new Promise((resolve, reject) => {
      const w = { resolve, reject, signal };
      if (signal) {
        w.onAbort = () => {
          const i = this.waiters.indexOf(w);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(abortError(signal));
        };
        signal.addEventListener('abort', w.onAbort, { once: true });
      }
      this.waiters.push(w);
    });
  }

  // Settles one schedule() caller (once) and lets a waiting one in.
  _settle(item, errOrJob, isError) {
    if (item.done) return;
    item.done = true;
    if (item.signal && item.onAbort) item.signal.removeEventListener('abort', item.onAbort);
    if (isError) item.reject(errOrJob);
    else item.resolve(errOrJob);
    this.outstanding--;
    // A waiting call takes the room at once (it is counted here, not when
    // it runs), so that one settle lets exactly one caller in.
    if (this.waiters.length && this.outstanding < this.maxOutstanding) {
      const w = this.waiters.shift();
      if (w.signal && w.onAbort) w.signal.removeEventListener('abort', w.onAbort);
      this.outstanding++;
      w.resolve();
    }
  }

  _flush() {
    if (this.timer) {
      this.timer.clear(this.timer.t);
      this.timer = null;
    }
    if (!this.buf.length) return;
    const items = this.buf;
    this.buf = [];
    this.bufBytes = 0;
    for (const it of items) it.queued = false;
    const p = this._sendBatch(items).finally(() => {
      this.inflight.delete(p);
      if (this.buf.length) this._arm();
    });
    this.inflight.add(p);
  }

  // Sends items (all-or-nothing on the server) until each caller has its
  // job or its own error: the items a 400 lists, or a 403/409 names, are
  // rejected with their error and the rest is sent again.
  async _sendBatch(items) {
    let live = items.filter((it) => !it.done);
    while (live.length) {
      const body = '[' + live.map((it) => it.json).join(',') + ']';
      let res;
      try {
        res = await this.requestFull('POST', '/schedule/batch', {
          rawBody: body,
          headers: { Prefer: 'return=minimal' },
          safe: true,
        });
      } catch (err) {
        const bad = this._badItems(err, live);
        if (bad) {
          for (const [it, e] of bad) this._settle(it, e, true);
          live = live.filter((it) => !bad.has(it) && !it.done);
          continue;
        }
        if (err instanceof PayloadTooLargeError && live.length > 1) {
          const half = Math.ceil(live.length / 2);
          await Promise.all([this._sendBatch(live.slice(0, half)), this._sendBatch(live.slice(half))]);
          return;
        }
        for (const it of live) this._settle(it, err, true);
        return;
      }
      const jobs = res.body && Array.isArray(res.body.jobs) ? res.body.jobs : [];
      live.forEach((it, i) => {
        if (jobs[i]) this._settle(it, jobs[i], false);
        else this._settle(it, new RmqsError('the batch answer lacks this job', { status: res.status }), true);
      });
      return;
    }
  }

  // The items an error is about, each with an error of its own; null if
  // the error is about the whole batch.
  _badItems(err, live) {
    if (err instanceof InvalidArgumentError && Array.isArray(err.errors) && err.errors.length) {
      const bad = new Map();
      for (const e of err.errors) {
        const it = live[e.index];
        if (!it || bad.has(it)) continue;
        bad.set(
          it,
          new InvalidArgumentError(e.message || err.message, {
            status: 400,
            code: 'invalid_argument',
            field: e.field,
            body: err.body,
          }),
        );
      }
      return bad.size ? bad : null;
    }
    const m = typeof err.field === 'string' && /^jobs\[(\d+)\]\.(.+)$/.exec(err.field);
    if (m && (err instanceof ForbiddenError || err instanceof ConflictError || err instanceof InvalidArgumentError)) {
      const it = live[Number(m[1])];
      if (!it) return null;
      const Cls = err.constructor;
      const e = new Cls(err.message, { status: err.status, code: err.code, field: m[2], body: err.body });
      return new Map([[it, e]]);
    }
    return null;
  }

  // Sends every buffered schedule() now.
  flush() {
    this._flush();
    return Promise.allSettled([...this.inflight]).then(() => undefined);
  }

  // An explicit batch: jobs in chunks of maxBatch items / maxBatchBytes,
  // each chunk all-or-nothing, in order. Resolves to the JobMinimal of each
  // (or the whole jobs with {minimal: false}), in the order given. A chunk
  // refused stops there: the error's `errors[].index` (or `jobs[<i>]` field)
  // is the index in `jobs`, and `error.scheduled` holds what the chunks
  // before stored.
  async scheduleMany(jobs, { idempotencyKeys, signal, minimal = true } = {}) {
    if (!Array.isArray(jobs)) throw new TypeError('scheduleMany(jobs): an array');
    const out = [];
    let chunk = [];
    let bytes = 2;
    let start = 0;
    const send = async () => {
      if (!chunk.length) return;
      const body = '[' + chunk.join(',') + ']';
      try {
        const r = await this.request('POST', '/schedule/batch', {
          rawBody: body,
          headers: minimal ? { Prefer: 'return=minimal' } : {},
          safe: true,
          signal,
        });
        out.push(...r.jobs);
      } catch (err) {
        if (Array.isArray(err.errors)) err.errors = err.errors.map((e) => ({ ...e, index: e.index + start }));
        const m = typeof err.field === 'string' && /^jobs\[(\d+)\](.*)$/.exec(err.field);
        if (m) err.field = `jobs[${Number(m[1]) + start}]${m[2]}`;
        err.scheduled = out;
        throw err;
      }
      start += chunk.length;
      chunk = [];
      bytes = 2;
    };
    for (let i = 0; i < jobs.length; i++) {
      const key = idempotencyKeys ? idempotencyKeys[i] : newKey();
      const s = this._itemJson(jobs[i], key);
      const b = Buffer.byteLength(s) + 1;
      if (chunk.length && (chunk.length >= this.maxBatch || bytes + b > this.maxBatchBytes)) await send();
      chunk.push(s);
      bytes += b;
    }
    await send();
    return out;
  }

  // POST /schedule, one job, with an Idempotency-Key header (the one given
  // or a random one: retries never create a second job). The whole job, or
  // its JobMinimal with {minimal: true}.
  scheduleOne(job, { idempotencyKey, signal, minimal = false } = {}) {
    const headers = { 'Idempotency-Key': idempotencyKey || newKey() };
    if (minimal) headers.Prefer = 'return=minimal';
    return this.request('POST', '/schedule', { body: job, headers, signal, safe: true });
  }

  // ------------------------------------------------------------ jobs

  get(id, { signal } = {}) {
    return this.request('GET', `/jobs/${seg(id)}`, { signal });
  }

  // Every job the filter matches, page by page (following `next`).
  async *list(filter = {}, { pageSize, signal } = {}) {
    let after;
    const { limit, ...f } = filter;
    for (;;) {
      const page = await this.request('GET', '/jobs', {
        query: { ...f, limit: pageSize || limit, after },
        signal,
      });
      for (const j of page.jobs) yield j;
      if (!page.next) return;
      after = page.next;
    }
  }

  count(filter = {}, { max, signal } = {}) {
    return this.request('GET', '/jobs/count', { query: { ...filter, max }, signal });
  }

  reschedule(id, when, { signal } = {}) {
    return this.request('PATCH', `/jobs/${seg(id)}`, { body: whenBody(when), signal, safe: true });
  }

  cancel(id, { signal } = {}) {
    return this.request('DELETE', `/jobs/${seg(id)}`, { signal });
  }

  runNow(id, { signal } = {}) {
    return this.request('POST', `/jobs/${seg(id)}/run`, { signal, safe: false });
  }

  retry(id, { deliverAt, delayMs, signal } = {}) {
    return this.request('POST', `/jobs/${seg(id)}/retry`, { body: whenBody({ deliverAt, delayMs }), signal });
  }

  bulk({ action, filter = {}, all, signal } = {}) {
    const body = { action, filter: filterBody(filter) };
    if (all !== undefined) body.all = all;
    return this.request('POST', '/jobs/bulk', { body, signal });
  }

  bulkStatus(id, { signal } = {}) {
    return this.request('GET', `/jobs/bulk/${seg(id)}`, { signal });
  }

  // Polls a bulk operation until it is no longer `running`; resolves to it.
  async waitBulk(id, { onProgress, signal, intervalMs = 200 } = {}) {
    for (;;) {
      const op = await this.bulkStatus(id, { signal });
      if (onProgress) onProgress(op);
      if (op.state !== 'running') return op;
      await sleep(intervalMs, signal);
    }
  }

  // ------------------------------------------------------------ schedules

  putSchedule(name, spec, { signal } = {}) {
    return this.request('PUT', `/schedules/${seg(name)}`, { body: spec, signal });
  }

  getSchedule(name, { count, signal } = {}) {
    return this.request('GET', `/schedules/${seg(name)}`, { query: { count }, signal });
  }

  async *listSchedules({ pageSize, signal } = {}) {
    let after;
    for (;;) {
      const page = await this.request('GET', '/schedules', { query: { limit: pageSize, after }, signal });
      for (const s of page.schedules) yield s;
      if (!page.next) return;
      after = page.next;
    }
  }

  patchSchedule(name, patch, { signal } = {}) {
    return this.request('PATCH', `/schedules/${seg(name)}`, { body: patch, signal, safe: true });
  }

  async deleteSchedule(name, { signal } = {}) {
    await this.request('DELETE', `/schedules/${seg(name)}`, { signal });
  }

  runSchedule(name, { idempotencyKey, signal } = {}) {
    return this.request('POST', `/schedules/${seg(name)}/run`, {
      headers: { 'Idempotency-Key': idempotencyKey || newKey() },
      signal,
      safe: true,
    });
  }

  // ------------------------------------------------------------ limits

  putLimit(name, spec, { signal } = {}) {
    return this.request('PUT', `/limits/${seg(name)}`, { body: spec, signal });
  }

  getLimit(name, { signal } = {}) {
    return this.request('GET', `/limits/${seg(name)}`, { signal });
  }

  async listLimits({ signal } = {}) {
    return (await this.request('GET', '/limits', { signal })).limits;
  }

  patchLimit(name, patch, { signal } = {}) {
    return this.request('PATCH', `/limits/${seg(name)}`, { body: patch, signal, safe: true });
  }

  async deleteLimit(name, { signal } = {}) {
    await this.request('DELETE', `/limits/${seg(name)}`, { signal });
  }

  // ------------------------------------------------------------ monitoring

  stats({ window, signal } = {}) {
    return this.request('GET', '/stats', { query: { window }, signal });
  }

  status({ signal } = {}) {
    return this.request('GET', '/status', { signal });
  }

  failures({ signal } = {}) {
    return this.request('GET', '/stats/failures', { signal });
  }

  // ------------------------------------------------------------ lifecycle

  // Sends what is buffered, waits for the batches in flight, then releases
  // the sockets (of the agent the client made). schedule() after close()
  // is an AbortError.
  async close() {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.waiters.splice(0)) w.reject(new AbortError('the client is closed', { code: 'aborted' }));
    await this.flush();
    if (this.ownAgent) this.agent.destroy();
  }
}

function isResetish(err) {
  return RESET_CODES.has(err.code) || /socket hang up/i.test(err.message || '');
}

// Full jitter: uniform in [0, min(cap, base * 2^(attempt-1))].
function backoff(attempt, baseMs, capMs) {
  return Math.random() * Math.min(capMs, baseMs * 2 ** (attempt - 1));
}

export default Client;
