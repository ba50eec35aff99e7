// tests/bench/clients/node/driver.mjs - the Node.js driver of the clients
// scenario (issue 26; tests/bench/clients.py runs it). Why it exists: the
// jobs/s and client CPU of scheduling through rmq-scheduler-client have to
// be measured in a Node process of their own, against the same jobs sent one
// request each with node:http, and against BullMQ's Queue.add().
//
//   node driver.mjs --mode lib|plain|bullmq --url http://127.0.0.1:P
//        --callers C --jobs N --seconds S --delay-ms D [--all-at-once]
//        [--redis-port P --queue NAME]
//
// mode lib:    Client.schedule() (batched into POST /schedule/batch), the
//              client's defaults (lingerMs 0, maxInFlight 8, its own agent);
// mode plain:  POST /schedule per job, node:http with a keep-alive Agent of
//              C sockets, no extra headers (what a user writes without the
//              library);
// mode bullmq: Queue.add() of a delayed job (delay D) on a private Redis.
//
// C callers each await one job at a time until N jobs were started or S
// seconds passed; with --all-at-once, N calls are started at once and each
// is awaited (Promise.all). Before the clock: one job per caller (at most
// 256; one with --all-at-once) to open connections, then "READY" on stdout;
// the clock starts at a line on stdin; at the end one line
// "RESULT {json}": jobs, seconds, cpu_us (process.cpuUsage of this process,
// user + system, over the measured window only), errors.
import http from 'node:http';
import readline from 'node:readline';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const mode = opt('mode');
const url = new URL(opt('url', 'http://127.0.0.1:8080'));
const callers = Number(opt('callers', '1'));
const jobs = Number(opt('jobs', '2000'));
const seconds = Number(opt('seconds', '10'));
const delayMs = Number(opt('delay-ms', '3600000'));
const allAtOnce = args.includes('--all-at-once');

// The same job for every way: a small JSON body.
const job = (i) => ({
  exchange: 'bench-clients',
  routing_key: 'order.reminder',
  body: { order: i, customer: `c-${i % 1000}` },
  delay_ms: delayMs,
});

let one; // (i) => Promise of one scheduled job
let close = async () => {};

if (mode === 'lib') {
  const { Client } = await import('rmq-scheduler-client');
  const client = new Client({ url: url.origin });
  one = (i) => client.schedule(job(i));
  close = () => client.close();
} else if (mode === 'plain') {
  const agent = new http.Agent({ keepAlive: true, maxSockets: callers });
  one = (i) =>
    new Promise((resolve, reject) => {
      const body = JSON.stringify(job(i));
      const req = http.request(
        {
          host: url.hostname,
          port: url.port,
          path: '/schedule',
          method: 'POST',
          agent,
          headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
        },
        (res) => {
          const chunks = [];
          res.on('data', (c) => chunks.push(c));
          res.on('end', () => {
            if (res.statusCode !== 201) {
              reject(new Error(`POST /schedule: ${res.statusCode} ${Buffer.concat(chunks)}`));
              return;
            }
            resolve(JSON.parse(Buffer.concat(chunks)).id);
          });
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  close = async () => agent.destroy();
} else if (mode === 'bullmq') {
  const { Queue } = await import('bullmq');
  const queue = new Queue(opt('queue', 'bench'), {
    connection: { host: '127.0.0.1', port: Number(opt('redis-port')) },
  });
  await queue.waitUntilReady();
  one = (i) => {
    const j = job(i);
    return queue.add(
      'reminder',
      { exchange: j.exchange, routing_key: j.routing_key, body: j.body },
      { delay: delayMs },
    );
  };
  close = () => queue.close();
} else {
  console.error(`driver.mjs: unknown --mode ${mode}`);
  process.exit(2);
}

let errors = 0;
let firstError = null;
const noteError = (e) => {
  errors += 1;
  if (!firstError) firstError = String(e && e.stack ? e.stack : e).slice(0, 300);
};

// warm-up: connections opened, scripts loaded, before the clock
const warm = allAtOnce ? 1 : Math.min(callers, 256);
await Promise.all(Array.from({ length: warm }, (_, k) => one(-1 - k).catch(noteError)));
if (errors) {
  console.error(`driver.mjs: warm-up failed: ${firstError}`);
  process.exit(1);
}
process.stdout.write('READY\n');
const rl = readline.createInterface({ input: process.stdin });
await new Promise((resolve) => rl.once('line', resolve));
rl.close();

const cpu0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
let done = 0;
if (allAtOnce) {
  await Promise.all(
    Array.from({ length: jobs }, (_, i) =>
      one(i).then(() => {
        done += 1;
      }, noteError),
    ),
  );
} else {
  const deadline = t0 + BigInt(Math.round(seconds * 1e9));
  let next = 0;
  const caller = async () => {
    while (next < jobs && process.hrtime.bigint() < deadline) {
      const i = next++;
      try {
        await one(i);
        done += 1;
      } catch (e) {
        noteError(e);
      }
    }
  };
  await Promise.all(Array.from({ length: callers }, caller));
}
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
const cpu = process.cpuUsage(cpu0);
const result = { jobs: done, seconds: secs, cpu_us: cpu.user + cpu.system, errors, first_error: firstError };
process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
await close();
process.exit(0);
