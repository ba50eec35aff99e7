// testlib/service.js - the real rmq-scheduler binary for the client's tests: a
// temporary SQLite database (or a PostgreSQL database of its own), a free
// loopback port, stopped by its PID.
//
// RMQS_BIN names the binary (e.g. /work/main/build-test/rmq-scheduler).
// RMQS_TEST_STORE=postgres (tests/run.sh, for the clients.*.postgres tests)
// gives each service a database of its own on the server RMQS_TEST_PG_ADMIN
// and RMQS_TEST_PG_URL name, dropped by destroy().
// RMQS_TEST_AMQP_URL names a RabbitMQ if there is one; without it the
// service gets a closed port: jobs are accepted and stored while the broker
// is down, which is all these tests need (nothing waits for a delivery).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export async function waitFor(what, fn, timeoutMs = 30000, everyMs = 50) {
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

export function bin() {
  const b = process.env.RMQS_BIN;
  if (!b) throw new Error('RMQS_BIN is not set: the path of the rmq-scheduler binary to test against');
  return b;
}

function pgEnv(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: RMQS_TEST_STORE=postgres needs the server tests/run.sh starts`);
  return v;
}

function psql(sql) {
  execFileSync(
    '/usr/lib/postgresql/15/bin/psql',
    ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', pgEnv('RMQS_TEST_PG_ADMIN'), '-c', sql],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
}

let closedAmqp;
async function amqpUrl() {
  if (process.env.RMQS_TEST_AMQP_URL) return process.env.RMQS_TEST_AMQP_URL;
  // A port nothing listens on: the broker is "down" for the whole test.
  if (!closedAmqp) closedAmqp = `amqp://guest:guest@127.0.0.1:${await freePort()}/`;
  return closedAmqp;
}

export class Service {
  constructor({ args = [], token = null, env = {} } = {}) {
    this.args = args;
    this.token = token;
    this.env = env;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rmqs-node-client-'));
    this.db = path.join(this.dir, 'scheduler.db');
    this.pgName = null;
    if (process.env.RMQS_TEST_STORE === 'postgres') {
      this.pgName = `rmqs_nc_${process.pid}_${Math.floor(Math.random() * 1e9)}`;
      psql(`CREATE DATABASE ${this.pgName} OWNER "${pgEnv('RMQS_TEST_PG_USER')}"`);
      this.db = `${pgEnv('RMQS_TEST_PG_URL')}/${this.pgName}`;
    }
    this.proc = null;
  }

  get url() {
    return `${this.scheme || 'http'}://127.0.0.1:${this.port}`;
  }

  // Starts the process (again, on the same port and database after stop()).
  // wait: false returns at once, before it listens.
  async start({ wait = true } = {}) {
    if (!this.port) this.port = await freePort();
    const e = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('RMQS_')) e[k] = v;
    if (!e.ASAN_OPTIONS) e.ASAN_OPTIONS = 'detect_leaks=0';
    if (this.token) e.RMQS_API_TOKEN = this.token;
    Object.assign(e, this.env);
    this.logPath = path.join(this.dir, 'service.log');
    const log = fs.openSync(this.logPath, 'a');
    this.proc = spawn(
      bin(),
      ['--listen', `127.0.0.1:${this.port}`, '--db', this.db, '--amqp-url', await amqpUrl(), ...this.args],
      { env: e, stdio: ['ignore', log, log] },
    );
    fs.closeSync(log);
    const proc = this.proc;
    this.exited = new Promise((resolve) => proc.once('exit', (code, sig) => resolve({ code, sig })));
    if (wait) await this.ready();
    return this;
  }

  async ready() {
    await waitFor('the service to be ready', async () => {
      if (this.proc.exitCode !== null) throw new Error('the service exited: ' + this.log());
      const r = await this.api('GET', '/healthz');
      return r.status === 200;
    });
  }

  log() {
    try {
      return fs.readFileSync(this.logPath, 'utf8').slice(-4000);
    } catch {
      return '';
    }
  }

  // A request of its own (fetch, no client): to check what the client did.
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

  // The value of one Prometheus sample of /metrics, summed over the lines
  // whose name and labels start with `prefix`.
  async metric(prefix) {
    const r = await this.api('GET', '/metrics');
    let sum = 0;
    for (const line of String(r.body).split('\n')) {
      if (line.startsWith(prefix)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
    return sum;
  }

  async stop(signal = 'SIGTERM') {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    process.kill(this.proc.pid, signal);
    const t = setTimeout(() => {
      if (this.proc.exitCode === null) process.kill(this.proc.pid, 'SIGKILL');
    }, 15000);
    const r = await this.exited;
    clearTimeout(t);
    return r;
  }

  async destroy() {
    await this.stop();
    if (this.pgName) psql(`DROP DATABASE IF EXISTS ${this.pgName} WITH (FORCE)`);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

// An http.Agent that counts the requests it carries.
export class CountingAgent extends http.Agent {
  constructor(opts) {
    super({ keepAlive: true, ...opts });
    this.requests = 0;
    this.paths = {};
  }
  addRequest(req, options) {
    this.requests++;
    this.paths[req.path] = (this.paths[req.path] || 0) + 1;
    return super.addRequest(req, options);
  }
}
