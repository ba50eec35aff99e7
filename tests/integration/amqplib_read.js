// amqplib_read.js - the x-delay header as Node's amqplib decodes it, for
// test_amqp_ingest.py: basic.get on QUEUE until COUNT messages came or
// TIMEOUT_MS passed; one line per message, "MESSAGE_ID VALUE" (VALUE "-"
// when there is no x-delay). Exit 0 if COUNT arrived.
//
//   node amqplib_read.js AMQP_URL QUEUE COUNT TIMEOUT_MS
'use strict';
const amqp = require('amqplib');

async function main() {
  const [url, queue, countText, timeoutText] = process.argv.slice(2);
  const count = Number(countText);
  const deadline = Date.now() + Number(timeoutText);
  const conn = await amqp.connect(url);
  let got = 0;
  try {
    const ch = await conn.createChannel();
    while (got < count) {
      const m = await ch.get(queue, { noAck: true });
      if (m === false) {
        if (Date.now() >= deadline) break;
        await new Promise((r) => setTimeout(r, 20)); // queue empty for now
        continue;
      }
      const h = m.properties.headers || {};
      const v = Object.prototype.hasOwnProperty.call(h, 'x-delay') ? h['x-delay'] : '-';
      process.stdout.write(`${m.properties.messageId} ${v}\n`);
      got++;
    }
  } finally {
    await conn.close();
  }
  process.exitCode = got === count ? 0 : 1;
}

main().catch((e) => {
  process.stderr.write(`amqplib_read: ${e.stack || e}\n`);
  process.exitCode = 2;
});
