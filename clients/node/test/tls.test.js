// HTTPS: the service with a certificate of a private CA (a self-signed one
// made here with openssl), the client trusting it through an `agent`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import https from 'node:https';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Client, ConnectionError } from '../index.js';
import { Service } from '../testlib/service.js';

test('https:// with an agent that trusts the certificate; refused without it', async () => {
  const s = new Service();
  const cert = path.join(s.dir, 'cert.pem');
  const key = path.join(s.dir, 'key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
    '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert,
  ], { stdio: 'ignore' }); // prettier-ignore
  s.args = ['--tls-cert-file', cert, '--tls-key-file', key];
  s.scheme = 'https';
  const agent = new https.Agent({ keepAlive: true, ca: fs.readFileSync(cert) });
  // Service.api() uses fetch, which does not trust the CA: wait with the client.
  await s.start({ wait: false });
  const c = new Client({ url: s.url, agent, retry: { attempts: 60, baseMs: 50, capMs: 200 } });
  try {
    assert.equal((await c.status()).database.state, 'up');
    const jobs = await Promise.all(
      [1, 2, 3].map((i) => c.schedule({ exchange: 'e', routing_key: 'tls', body: { i }, delay_ms: 60000 })),
    );
    assert.equal((await c.get(jobs[2].id)).body.i, 3);
    const untrusting = new Client({ url: s.url, retry: { attempts: 1 } });
    await assert.rejects(
      untrusting.status(),
      (e) => e instanceof ConnectionError && /self.signed|certificate/i.test(e.message),
    );
    await untrusting.close();
  } finally {
    await c.close();
    agent.destroy();
    await s.destroy();
  }
});
