// ttl-dlx: a direct DLX "<prefix>.dlx" with "<prefix>.dlq" bound by "dead", and a work queue
// "<prefix>.work" with x-dead-letter-exchange, x-dead-letter-routing-key "dead" and x-message-ttl
// --queue-ttl. Two messages go to the work queue through a ConfirmChannel, nobody consumes them there:
// "per-message" with expiration --expiration (published first, so it is at the head and expires first),
// then "queue-ttl" without one. Both are dead-lettered; the DLQ consumer prints them with x-death
// decoded as amqplib gives it and checks amqplib's JavaScript types: x-death an Array of plain objects,
// count a number, time {'!': 'timestamp', value: <number>}, routing-keys an Array of strings,
// reason/queue/exchange (and original-expiration) strings.
//
// data: names, published_headers, deliveries {message_id: {delivery (deliveryInfo), x_death (typed),
// elapsed_ms (publish to dead-letter delivery), now_unix (at arrival)}}, work_ready_after.
'use strict';

const { connect, deleteLater, Inbox, watch } = require('../lib/amqp');
const { jsType, typed, deliveryInfo } = require('../lib/typed');
const { within } = require('../lib/run');

const DL_KEY = 'dead';

/** The types amqplib gives x-death's fields (see lib/typed.js); failures name the JavaScript type seen. */
function checkXDeath(run, id, headers) {
  const raw = headers ? headers['x-death'] : undefined;
  if (!run.check(raw !== undefined, `${id}: no x-death header (headers: ${Object.keys(headers || {})})`)) return;
  if (!run.check(Array.isArray(raw) && raw.length > 0, `${id}: x-death is ${jsType(raw)}, want a non-empty Array`)) {
    return;
  }
  raw.forEach((death, i) => {
    const where = `${id}: x-death[${i}]`;
    if (!run.check(jsType(death) === 'object', `${where} is ${jsType(death)}, want a plain object (table)`)) return;
    run.check(Number.isInteger(death.count), `${where}.count is ${jsType(death.count)}, want an integer number`);
    const time = death.time;
    run.check(
      jsType(time) === "{'!': 'timestamp'}" && Number.isInteger(time.value),
      `${where}.time is ${JSON.stringify(typed(time))}, want {'!': 'timestamp', value: <integer>}`,
    );
    for (const key of ['reason', 'queue', 'exchange']) {
      run.check(typeof death[key] === 'string', `${where}.${key} is ${jsType(death[key])}, want string`);
    }
    const keys = death['routing-keys'];
    if (run.check(Array.isArray(keys), `${where}.routing-keys is ${jsType(keys)}, want Array`)) {
      keys.forEach((k, j) => {
        run.check(typeof k === 'string', `${where}.routing-keys[${j}] is ${jsType(k)}, want string`);
      });
    }
  });
}

async function scenario(run, opts) {
  const queueTTL = Number.parseInt(opts['queue-ttl'], 10);
  const expiration = opts.expiration;
  const conn = await connect(run);
  const call = (what, promise) => {
    run.step(what);
    return within(run, promise, what);
  };
  const ch = await call('create confirm channel', conn.createConfirmChannel());
  watch(run, 'channel', ch);
  const dlx = run.name('dlx');
  const dlq = run.name('dlq');
  const work = run.name('work');
  run.set('names', { dlx, dlq, work, dl_routing_key: DL_KEY });
  deleteLater(run, conn, [work, dlq], [dlx]);

  await call(`exchange.declare ${dlx}`, ch.assertExchange(dlx, 'direct', { durable: false }));
  await call(`queue.declare ${dlq}`, ch.assertQueue(dlq, { durable: false }));
  await call('queue.bind', ch.bindQueue(dlq, dlx, DL_KEY));
  const args = { 'x-dead-letter-exchange': dlx, 'x-dead-letter-routing-key': DL_KEY, 'x-message-ttl': queueTTL };
  await call(`queue.declare ${work}`, ch.assertQueue(work, { durable: false, arguments: args }));
  const inbox = new Inbox();
  await call(`basic.consume ${dlq}`, ch.consume(dlq, (msg) => inbox.push(msg), { consumerTag: 'node-e2e-dlq' }));

  const headers = { 'x-e2e-origin': 'node', attempt: 3, trace: { id: 42 } };
  run.set('published_headers', typed(headers).value);
  const published = {};
  for (const [id, props] of [
    ['per-message', { expiration }],
    ['queue-ttl', {}],
  ]) {
    run.step(`publish ${id}`);
    published[id] = Date.now();
    ch.sendToQueue(work, Buffer.from(`expire me (${id})`), {
      contentType: 'text/plain',
      messageId: id,
      headers,
      ...props,
    });
  }
  await call('waitForConfirms', ch.waitForConfirms());

  const deliveries = {};
  for (let n = 0; n < 2; n++) {
    const msg = await inbox.next(run, `dead-lettered message ${n + 1} of 2`);
    const id = msg.properties.messageId;
    deliveries[id] = {
      elapsed_ms: Date.now() - (published[id] || 0),
      now_unix: Math.floor(Date.now() / 1000),
      delivery: deliveryInfo(msg),
      x_death: typed(msg.properties.headers ? msg.properties.headers['x-death'] : undefined),
    };
    ch.ack(msg);
    checkXDeath(run, id, msg.properties.headers);
  }
  run.set('deliveries', deliveries);
  run.check(
    Object.keys(deliveries).sort().join(',') === 'per-message,queue-ttl',
    `dead-lettered message ids ${Object.keys(deliveries)}`,
  );
  const after = await call(`queue.declare passive ${work}`, ch.checkQueue(work));
  run.set('work_ready_after', after.messageCount);
  run.check(after.messageCount === 0, `${after.messageCount} messages still ready in ${work}`);
}

module.exports = {
  help: 'x-message-ttl and per-message expiration dead-letter to a DLX; x-death as amqplib decodes it',
  options: {
    'queue-ttl': { type: 'string', default: '200' },
    expiration: { type: 'string', default: '100' },
  },
  run: scenario,
};
