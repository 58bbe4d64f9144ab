// dead-letter: the "Node dead-letters" step of e2e/test_mixed_clients.py. Consume --count messages from
// an existing queue (--queue, default "<prefix>"; declared by the caller with a DLX) and reject each one
// with nack(msg, false, false), so the broker dead-letters it. Declares and deletes nothing. After the
// nacks a passive declare on the same channel answers only once the broker has handled them.
//
// data: queue, deliveries (deliveryInfo of each, headers typed as amqplib decoded them), nacked,
// ready_after, consumers_after (the consumer is cancelled first, so 0).
'use strict';

const { connect, Inbox, watch } = require('../lib/amqp');
const { deliveryInfo } = require('../lib/typed');
const { within } = require('../lib/run');

const CONSUMER_TAG = 'node-e2e-dead-letter';

async function scenario(run, opts) {
  const count = Number.parseInt(opts.count, 10);
  const queue = opts.queue || run.name();
  run.set('queue', queue);
  const conn = await connect(run);
  const call = (what, promise) => {
    run.step(what);
    return within(run, promise, what);
  };
  const ch = await call('create channel', conn.createChannel());
  watch(run, 'channel', ch);
  await call(`queue.declare passive ${queue}`, ch.checkQueue(queue));
  await call(`basic.qos ${count}`, ch.prefetch(count));
  const inbox = new Inbox();
  await call(`basic.consume ${queue}`, ch.consume(queue, (msg) => inbox.push(msg), { consumerTag: CONSUMER_TAG }));
  const deliveries = [];
  for (let n = 0; n < count; n++) {
    const msg = await inbox.next(run, `message ${n + 1} of ${count}`);
    deliveries.push(deliveryInfo(msg));
    run.step(`basic.nack ${msg.fields.deliveryTag} requeue=false`);
    ch.nack(msg, false, false);
  }
  run.set('deliveries', deliveries);
  run.set('nacked', deliveries.length);
  await call('basic.cancel', ch.cancel(CONSUMER_TAG));
  const after = await call(`queue.declare passive ${queue} (after nacks)`, ch.checkQueue(queue));
  run.set('ready_after', after.messageCount);
  run.set('consumers_after', after.consumerCount);
  run.check(after.messageCount === 0, `${after.messageCount} messages still ready in ${queue} after the nacks`);
  await call('channel.close', ch.close());
}

module.exports = {
  help: 'consume from --queue and nack(msg, false, false) each message so the broker dead-letters it',
  options: {
    queue: { type: 'string', default: '' },
    count: { type: 'string', default: '1' },
  },
  run: scenario,
};
