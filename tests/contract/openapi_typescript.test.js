// api/openapi.yaml through a code generator: openapi-typescript (the version
// locked in package-lock.json) writes its types into a temporary folder, and
// tsc --strict checks against them every request body the documentation
// shows (fixtures/accept.ts: must compile) and requests the server refuses
// (fixtures/reject-*.ts: each must fail with the TypeScript error below).
// Nothing generated is kept; no network.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { typecheck } from './tsc.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const spec = path.resolve(here, '../../api/openapi.yaml');
const fixtures = path.join(here, 'fixtures');
const generator = path.join(here, 'node_modules/openapi-typescript/bin/cli.js');

// Each request the server answers 400, and the error tsc must give for it.
const REJECTS = {
  'reject-no-delay.ts': 'TS2322', // neither deliver_at nor delay_ms
  'reject-both-delays.ts': 'TS2322', // deliver_at and delay_ms
  'reject-no-body.ts': 'TS2322', // neither body nor body_base64
  'reject-no-body-no-delay.ts': 'TS2322', // only exchange and routing_key
  'reject-both-bodies.ts': 'TS2322', // body and body_base64
  'reject-body-number.ts': 'TS2322', // a number is no body
  'reject-delay-string.ts': 'TS2322', // delay_ms: "2000"
  'reject-unknown-field.ts': 'TS2353', // additionalProperties: false
  'reject-reschedule-both.ts': 'TS2322', // PATCH /jobs/{id} with both times
  'reject-schedule-both.ts': 'TS2322', // PUT /schedules/{name}: cron and every_ms
  'reject-limit-burst-alone.ts': 'TS2322', // PUT /limits/{name}: burst without rate_per_s
};

let dir;

function run(args) {
  const r = spawnSync(process.execPath, args, { cwd: dir, encoding: 'utf8', timeout: 120_000 });
  if (r.error) throw r.error;
  return r;
}

// tsc on one fixture of the temporary folder.
const check = (file) => typecheck(file, { cwd: dir });

before(() => {
  assert.ok(existsSync(generator), `${generator} is missing (cd tests/contract && npm ci)`);
  dir = mkdtempSync(path.join(tmpdir(), 'rmqs-contract-'));
  const r = run([generator, spec, '--output', path.join(dir, 'api.ts')]);
  assert.equal(r.status, 0, `openapi-typescript failed:\n${r.stdout}${r.stderr}`);
  for (const f of readdirSync(fixtures)) copyFileSync(path.join(fixtures, f), path.join(dir, f));
});

after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('the generated request body types are unions, not unknown', () => {
  const api = readFileSync(path.join(dir, 'api.ts'), 'utf8');
  assert.match(api, /JobBody: string \| \{\s*\[key: string\]: unknown;\s*\} \| unknown\[\];/);
  assert.match(api, /body_base64\?: never;/);
  assert.match(api, /deliver_at\?: never;/);
  // A rule whose branches the generator could not read is `unknown | unknown`.
  assert.ok(!api.includes('unknown | unknown'), 'a oneOf/anyOf became unknown');
});

test('every documented request body type-checks (fixtures/accept.ts)', () => {
  const r = check('accept.ts');
  assert.deepEqual(r.errors, [], r.output);
  assert.equal(r.status, 0, r.output);
});

test('every reject fixture has an expected error', () => {
  const files = readdirSync(fixtures).filter((f) => f.startsWith('reject-'));
  assert.deepEqual(files.sort(), Object.keys(REJECTS).sort());
});

for (const [file, code] of Object.entries(REJECTS)) {
  test(`refused: ${file} (${code})`, () => {
    const r = check(file);
    assert.equal(r.status, 2, `tsc exit status\n${r.output}`);
    assert.equal(r.errors.length, 1, r.output);
    assert.equal(r.errors[0].file, file, r.output);
    assert.equal(r.errors[0].code, code, r.output);
  });
}
