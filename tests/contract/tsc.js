// tsc.js - the TypeScript compiler (the version locked in package-lock.json)
// on one file, for the contract tests: --strict, ES2022 modules, nothing
// emitted. Resolves to its exit status and its errors as {file, line, code}.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const tsc = path.join(here, 'node_modules/typescript/bin/tsc');

// cwd: where the file's relative names start; types: the @types packages
// to load (from this folder's node_modules), none by default.
export function typecheck(file, { cwd, types = [] } = {}) {
  const args = [tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'es2022'];
  args.push('--moduleResolution', 'bundler', '--pretty', 'false');
  if (types.length) args.push('--types', types.join(','), '--typeRoots', path.join(here, 'node_modules/@types'));
  const r = spawnSync(process.execPath, [...args, file], { cwd, encoding: 'utf8', timeout: 120_000 });
  if (r.error) throw r.error;
  const errors = [...r.stdout.matchAll(/^(.+?)\((\d+),\d+\): error (TS\d+):/gm)].map((m) => ({
    file: m[1],
    line: Number(m[2]),
    code: m[3],
  }));
  return { status: r.status, errors, output: r.stdout + r.stderr };
}
