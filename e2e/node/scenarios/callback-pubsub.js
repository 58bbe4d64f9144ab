// callback-pubsub: amqplib's callback API (require('amqplib/callback_api')). Declare "<prefix>",
// publish --count messages with sendToQueue (no confirms), then consume them with manual acks and
// prefetch --prefetch: exactly --prefetch arrive and nothing more within --quiet ms, then one
// multiple-ack (allUpTo) frees the window and the rest are acked one by one. Checks order, bodies,
// properties, header types and delivery tags; then passive declare, cancel, delete.
//
// data: queue, declare_ok, published, prefetch_window, extra_in_window, received, first, last
// (see deliveryInfo), ready_after_acks, consumers_after_acks, cancel_ok, delete_ok.
'use strict';

const { callback, connectCallback, Inbox, watch } = require('../lib/amqp');
const { deliveryInfo, jsType } = require('../lib/typed');
const { within } = require('../lib/run');

const CONSUMER_TAG = 'node-e2e-callback';

async function scenario(run, opts) {
  const count = Number.parseInt(opts.count, 10);
  const prefetch = Number.parseInt(opts.prefetch, 10);
  const quietMs = Number.parseInt(opts.quiet, 10);
  const conn = await connectCallback(run);
  // Each call below is the callback API's own; `call` only turns its callback into an awaitable step.
  const call = (what, fn) => {
    run.step(what);
    return within(run, callback(fn), what);
  };
  const ch = await call('create channel', (cb) => conn.createChannel(cb));
  watch(run, 'channel', ch);
  const queue = run.name();
  run.set('queue', queue);
  run.defer(() =>
    callback((cb) =>
      conn.createChannel((err, c) => {
        if (err) return cb(null);
        c.on('error', () => {});
        c.deleteQueue(queue, {}, () => c.close(() => cb(null)));
      }),
    ),
  );

  const declared = await call(`queue.declare ${queue}`, (cb) => ch.assertQueue(queue, { durable: false }, cb));
  run.set('declare_ok', declared);
  run.check(
    declared.queue === queue && declared.messageCount === 0 && declared.consumerCount === 0,
    `declare-ok ${JSON.stringify(declared)}`,
  );

  for (let i = 0; i < count; i++) {
    run.step(`publish ${i + 1}`);
    ch.sendToQueue(queue, Buffer.from(`msg-${String(i).padStart(3, '0')}`), {
      contentType: 'text/plain',
      messageId: `m${i}`,
      headers: { seq: i, origin: 'node-callback' },
    });
  }
  run.set('published', count);

  await call(`basic.qos ${prefetch}`, (cb) => ch.prefetch(prefetch, false, cb));
  const inbox = new Inbox();
  const ok = await call('basic.consume', (cb) =>
    ch.consume(queue, (msg) => inbox.push(msg), { noAck: false, consumerTag: CONSUMER_TAG }, cb),
  );
  run.check(ok.consumerTag === CONSUMER_TAG, `consume-ok ${JSON.stringify(ok)}`);

  let received = 0;
  const verify = (msg) => {
    const i = received++;
    if (received === 1) run.set('first', deliveryInfo(msg));
    if (received === count) run.set('last', deliveryInfo(msg));
    const want = `msg-${String(i).padStart(3, '0')}`;
    const { fields, properties } = msg;
    run.check(msg.content.toString() === want, `delivery ${i + 1} body ${msg.content}, want ${want}`);
    run.check(fields.deliveryTag === i + 1, `delivery ${i + 1} has tag ${fields.deliveryTag}`);
    run.check(!fields.redelivered, `delivery ${i + 1} redelivered`);
    run.check(
      fields.consumerTag === CONSUMER_TAG && fields.exchange === '' && fields.routingKey === queue,
      `delivery ${i + 1} consumerTag=${fields.consumerTag} exchange=${fields.exchange} routingKey=${fields.routingKey}`,
    );
    run.check(
      properties.messageId === `m${i}` && properties.contentType === 'text/plain',
      `delivery ${i + 1} messageId=${properties.messageId} contentType=${properties.contentType}`,
    );
    const seq = properties.headers && properties.headers.seq;
    run.check(seq === i, `delivery ${i + 1} header seq is ${jsType(seq)} ${seq}, want number ${i}`);
  };

  const window = Math.min(prefetch, count);
  let last = null;
  while (received < window) {
    last = await inbox.next(run, `delivery ${received + 1} of ${count}`);
    verify(last);
  }
  run.set('prefetch_window', received);
  run.step(`check that nothing beyond the prefetch window arrives within ${quietMs} ms`);
  const extra = await inbox.nothingWithin(quietMs);
  run.set('extra_in_window', extra === undefined ? 0 : 1);
  if (!run.check(extra === undefined, `a delivery beyond prefetch ${prefetch} arrived before any ack`)) {
    run.set('extra_delivery', deliveryInfo(extra));
    return;
  }
  if (last !== null) {
    run.step('ack window (allUpTo)');
    ch.ack(last, true);
  }
  while (received < count) {
    const msg = await inbox.next(run, `delivery ${received + 1} of ${count}`);
    verify(msg);
    ch.ack(msg);
  }
  run.set('received', received);

  const after = await call(`queue.declare passive ${queue}`, (cb) => ch.checkQueue(queue, cb));
  run.set('ready_after_acks', after.messageCount);
  run.set('consumers_after_acks', after.consumerCount);
  run.check(
    after.messageCount === 0 && after.consumerCount === 1,
    `after acks: ${after.messageCount} ready, ${after.consumerCount} consumers`,
  );
  const cancelled = await call('basic.cancel', (cb) => ch.cancel(CONSUMER_TAG, cb));
  run.set('cancel_ok', cancelled);
  const deleted = await call(`queue.delete ${queue}`, (cb) => ch.deleteQueue(queue, {}, cb));
  run.set('delete_ok', deleted);
  run.check(deleted.messageCount === 0, `queue.delete-ok ${JSON.stringify(deleted)}`);
  await call('channel.close', (cb) => ch.close(cb));
}

module.exports = {
  help: 'callback API: publish, consume with manual acks and prefetch',
  options: {
    count: { type: 'string', default: '20' },
    prefetch: { type: 'string', default: '5' },
    quiet: { type: 'string', default: '100' },
  },
  run: scenario,
};
