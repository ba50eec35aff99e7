// The README's quick start, run as written against the real service: only
// the service's URL (this test's port) and the package's name (this
// checkout's index.js) are replaced, so the documented example cannot
// drift from the library.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Service } from '../testlib/service.js';

let svc;
before(async () => {
  svc = await new Service().start();
});
after(async () => {
  await svc.destroy();
});

test("the README's quick start runs as written", () => {
  const md = fs.readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const m = /## Quick start[\s\S]*?```js\n([\s\S]*?)```/.exec(md);
  assert.ok(m, 'README.md has a js block under "## Quick start"');
  let code = m[1];
  for (const s of ["'http://127.0.0.1:8080'", "'rmq-scheduler-client'"]) assert.ok(code.includes(s), s);
  code = code
    .replace("'http://127.0.0.1:8080'", JSON.stringify(svc.url))
    .replace("'rmq-scheduler-client'", JSON.stringify(new URL('../index.js', import.meta.url).href));
  const file = path.join(svc.dir, 'quickstart.mjs');
  fs.writeFileSync(file, code);
  const env = { ...process.env };
  delete env.RMQS_API_TOKEN;
  const r = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 60000, env });
  assert.equal(r.status, 0, r.stderr);
  // What its comments say it prints.
  assert.match(r.stdout, /status: 'pending'/);
  assert.match(r.stdout, /^delay_ms delay_ms: must not be negative/m);
});
