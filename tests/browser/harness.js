// harness.js - what every browser test shares: the real service binary
// started on a free loopback port (stopped by its PID), its store (a
// SQLite file, or a PostgreSQL database of its own on the server
// tests/run.sh started), the HTTP API, a RabbitMQ queue to consume from,
// and a Chromium page that records its console, errors, dialogs and every
// request it makes.
//
// Read from tests/run.sh and ctest: RMQS_BIN, RMQS_TEST_AMQP_URL,
// RMQS_TEST_STORE (sqlite|postgres), RMQS_TEST_PG_ADMIN, RMQS_TEST_PG_URL,
// RMQS_TEST_ARTIFACTS (screenshots of each run). RMQS_UI_SCREENSHOTS=docs
// also writes the README's docs/screenshots/*.png.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { chromium } from 'playwright-core';
import amqplib from 'amqplib';

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '../..');

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the browser tests through tests/run.sh`);
  return v;
}

export const store = () => process.env.RMQS_TEST_STORE || 'sqlite';
export const TOKEN = 'browser-test-token-0123456789';

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function psql(conninfo, sql) {
  execFileSync('/usr/lib/postgresql/15/bin/psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', conninfo, '-c', sql], {
    stdio: ['ignore', 'ignore', 'pipe'],
    timeout: 30000,
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Poll fn until it returns a truthy value (returned), at most timeoutMs.
export async function waitFor(what, fn, timeoutMs = 20000, everyMs = 100) {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what} (last: ${last})`);
    await sleep(everyMs);
  }
}

export class Service {
  constructor({ args = [], token = null } = {}) {
    this.args = args;
    this.token = token;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rmqs-browser-'));
    this.db = path.join(this.dir, 'scheduler.db');
    this.pgName = null;
  }

  async start() {
    this.port = await freePort();
    this.url = `http://127.0.0.1:${this.port}`;
    if (store() === 'postgres') {
      this.pgName = 'rmqs_b_' + process.pid + '_' + Math.floor(Math.random() * 1e9);
      psql(env('RMQS_TEST_PG_ADMIN'), `CREATE DATABASE ${this.pgName} OWNER "${env('RMQS_TEST_PG_USER')}"`);
      this.db = `${env('RMQS_TEST_PG_URL')}/${this.pgName}`;
    }
    const e = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('RMQS_') || k.startsWith('RMQS_TEST')) e[k] = v;
    if (this.token) e.RMQS_API_TOKEN = this.token;
    this.logPath = path.join(this.dir, 'service.log');
    const log = fs.openSync(this.logPath, 'a');
    this.proc = spawn(
      env('RMQS_BIN'),
      ['--listen', `127.0.0.1:${this.port}`, '--db', this.db, '--amqp-url', env('RMQS_TEST_AMQP_URL'), ...this.args],
      { env: e, stdio: ['ignore', log, log] },
    );
    fs.closeSync(log);
    this.exited = new Promise((resolve) => this.proc.once('exit', (code, sig) => resolve({ code, sig })));
    await waitFor(
      'the service to be ready',
      async () => {
        if (this.proc.exitCode !== null) throw new Error('the service exited: ' + this.log());
        const r = await this.api('GET', '/readyz');
        return r.status === 200;
      },
      30000,
      50,
    );
    return this;
  }

  log() {
    try {
      return fs.readFileSync(this.logPath, 'utf8').slice(-4000);
    } catch {
      return '';
    }
  }

  // The API as a script (no Origin, no Sec-Fetch-Site): what curl does.
  async api(method, p, body, headers = {}) {
    const h = { ...headers };
    if (this.token && !h.Authorization) h.Authorization = 'Bearer ' + this.token;
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const resp = await fetch(this.url + p, {
      method,
      headers: h,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await resp.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = text;
    }
    return { status: resp.status, body: json, headers: resp.headers };
  }

  async job(id) {
    const r = await this.api('GET', '/jobs/' + id);
    if (r.status !== 200) throw new Error(`GET /jobs/${id}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }

  async schedule(job) {
    const r = await this.api('POST', '/schedule', job);
    if (r.status !== 201) throw new Error(`POST /schedule: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }

  // n jobs made by make(i), 1,000 a request (POST /schedule/batch).
  async seed(n, make) {
    for (let i = 0; i < n; i += 1000) {
      const batch = [];
      for (let k = i; k < Math.min(n, i + 1000); k++) batch.push(make(k));
      const r = await this.api('POST', '/schedule/batch', batch, { Prefer: 'return=minimal' });
      if (r.status !== 201)
        throw new Error(`POST /schedule/batch: ${r.status} ${JSON.stringify(r.body).slice(0, 500)}`);
    }
  }

  async stop() {
    if (this.proc && this.proc.exitCode === null) {
      process.kill(this.proc.pid, 'SIGTERM');
      const t = setTimeout(() => {
        if (this.proc.exitCode === null) process.kill(this.proc.pid, 'SIGKILL');
      }, 15000);
      await this.exited;
      clearTimeout(t);
    }
    if (this.pgName) {
      try {
        psql(env('RMQS_TEST_PG_ADMIN'), `DROP DATABASE IF EXISTS ${this.pgName} WITH (FORCE)`);
      } catch {
        /* the server goes at the end */
      }
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

// A later deliver_at, relative to now.
export const inMinutes = (m) => new Date(Date.now() + m * 60000).toISOString();

// A queue bound to nothing but the default exchange: a job to
// exchange "" with routing_key = its name is routed (and so sent).
export async function queue(name = '') {
  const conn = await amqplib.connect(env('RMQS_TEST_AMQP_URL'));
  const ch = await conn.createChannel();
  const q = await ch.assertQueue(name, { exclusive: true, autoDelete: true });
  return { name: q.queue, close: () => conn.close() };
}

export const PHONE = { width: 390, height: 844 };
export const DESKTOP = { width: 1280, height: 900 };

export async function launch() {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--disable-background-networking', '--proxy-server=http://127.0.0.1:9'],
  });
}

// A page that records what it did: console messages (every one: the
// dashboard logs nothing, so any message is a fault, a CSP violation
// included), uncaught errors, dialogs (alert/confirm/prompt: a script that
// ran), every request's URL, and the main document's response headers.
// colorScheme: what prefers-color-scheme answers (light or dark).
export async function openPage(browser, svc, { viewport = DESKTOP, bypassCSP = false, colorScheme = 'light' } = {}) {
  const context = await browser.newContext({ viewport, bypassCSP, colorScheme });
  const page = await context.newPage();
  const rec = { console: [], errors: [], dialogs: [], requests: [], documents: [] };
  page.on('console', (m) => rec.console.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => rec.errors.push(String(e)));
  page.on('dialog', (d) => {
    rec.dialogs.push(d.message());
    d.dismiss().catch(() => {});
  });
  page.on('request', (r) => rec.requests.push(r.url()));
  page.on('response', (r) => {
    if (r.request().resourceType() === 'document') rec.documents.push(r);
  });
  return { context, page, rec };
}

// Go to a route (#/...) and wait until the app has started.
export async function visit(page, svc, route = '#/') {
  await page.goto(svc.url + '/ui/' + route);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 15000 });
}

// axe-core in the page with its CSP enforced (evaluated, not injected as
// a script tag): the serious and critical findings.
const AXE = fs.readFileSync(require.resolve('axe-core'), 'utf8');
export async function axe(page) {
  await page.evaluate(AXE);
  const res = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5),
    }));
  });
  return res;
}
// A figure the test measured: printed, and appended to $RMQS_TEST_REPORT
// (tests/run.sh prints that file after the stage).
export function report(line) {
  console.log(line);
  if (process.env.RMQS_TEST_REPORT) fs.appendFileSync(process.env.RMQS_TEST_REPORT, line + '\n');
}
export const seriousOrCritical = (violations) =>
  violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');

export async function screenshot(page, name) {
  const dir = process.env.RMQS_TEST_ARTIFACTS || path.join(os.tmpdir(), 'rmqs-browser-artifacts');
  fs.mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: path.join(dir, `${name}.${store()}.png`), fullPage: true });
  if (process.env.RMQS_UI_SCREENSHOTS === 'docs' && store() === 'sqlite') {
    const docs = path.join(repo, 'docs', 'screenshots');
    fs.mkdirSync(docs, { recursive: true });
    if (!name.endsWith('-phone') || name === 'overview-phone')
      await page.screenshot({ path: path.join(docs, `${name}.png`), fullPage: false });
  }
}
