// clients/node's hand-written types (index.d.ts) under tsc --strict: the
// README's quick start type-checks as written (its import pointed at this
// checkout's index.js), and a schedule() the service would refuse with a
// 400 does not (neither body nor body_base64, neither delay_ms nor
// deliver_at, both of a pair). The types of node:http come from
// @types/node (locked in package-lock.json). Nothing is kept; no network.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { typecheck } from './tsc.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const library = path.resolve(here, '../../clients/node');

let dir;
before(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'rmqs-node-client-types-'));
});
after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// tsc on one file written to the temporary folder, with node's types.
function check(name, code) {
  const file = path.join(dir, name);
  writeFileSync(file, code);
  return typecheck(file, { cwd: dir, types: ['node'] });
}

const importLine = `import { Client } from ${JSON.stringify(path.join(library, 'index.js'))};\n`;

test("the README's quick start type-checks against index.d.ts", () => {
  const md = readFileSync(path.join(library, 'README.md'), 'utf8');
  const m = /## Quick start[\s\S]*?```js\n([\s\S]*?)```/.exec(md);
  assert.ok(m, 'README.md has a js block under "## Quick start"');
  const code = m[1].replace("'rmq-scheduler-client'", JSON.stringify(path.join(library, 'index.js')));
  const r = check('quickstart.ts', code + '\nexport {};\n');
  assert.equal(r.status, 0, r.output);
});

test('schedule() of what the service refuses does not type-check', () => {
  const bad = [
    "{ exchange: 'o', routing_key: 'r', body: 'x' }", // no delay
    "{ exchange: 'o', routing_key: 'r', delay_ms: 1 }", // no body
    "{ exchange: 'o', routing_key: 'r', body: 'x', delay_ms: 1, deliver_at: '2030-01-01T00:00:00Z' }",
    "{ exchange: 'o', routing_key: 'r', body: 'x', body_base64: 'eA==', delay_ms: 1 }",
    "{ exchange: 'o', routing_key: 'r', body: 1, delay_ms: 1 }", // a number is no body
  ];
  const good = [
    "{ exchange: 'o', routing_key: 'r', body: { a: 1 }, delay_ms: 1 }",
    "{ exchange: 'o', routing_key: 'r', body_base64: 'eA==', deliver_at: '2030-01-01T00:00:00Z' }",
  ];
  // One call per line, after the import and the client (lines 1 and 2).
  const lines = [...good, ...bad].map((j) => `void c.schedule(${j});`);
  const r = check(
    'calls.ts',
    importLine + "const c = new Client({ url: 'http://127.0.0.1:8080' });\n" + lines.join('\n') + '\n',
  );
  const failing = new Set(r.errors.map((e) => e.line));
  const expected = new Set(bad.map((_, i) => 3 + good.length + i));
  assert.deepEqual(failing, expected, r.output);
});
