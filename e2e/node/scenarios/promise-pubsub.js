// promise-pubsub: amqplib's promise API (require('amqplib')). A topic exchange "<prefix>.x" and a queue
// "<prefix>" bound with "node.*.info"; --count publishes alternate between "node.<i>.info" (routed) and
// "node.<i>.debug" (dropped). The first routed message is fetched with basic.get (its messageCount is
// what is left), the rest consumed with manual acks; then basic.get on the empty queue gives false.
// Then cancel, unbind, delete queue and exchange.
//
// data: queue, exchange, declare_ok, published, routed, get_first (deliveryInfo, message_count),
// received (consumed after the get), last, get_empty, ready_after_acks, cancel_ok, unbind_ok, delete_ok.
'use strict';

const { connect, deleteLater, Inbox, watch } = require('../lib/amqp');
const { deliveryInfo, jsType } = require('../lib/typed');
const { within } = require('../lib/run');

const CONSUMER_TAG = 'node-e2e-promise';
const BINDING = 'node.*.info';

async function scenario(run, opts) {
  const count = Number.parseInt(opts.count, 10);
  const conn = await connect(run);
  const call = (what, promise) => {
    run.step(what);
    return within(run, promise, what);
  };
  const ch = await call('create channel', conn.createChannel());
  watch(run, 'channel', ch);
  const queue = run.name();
  const exchange = run.name('x');
  run.set('queue', queue);
  run.set('exchange', exchange);
  deleteLater(run, conn, [queue], [exchange]);

  await call(`exchange.declare ${exchange} topic`, ch.assertExchange(exchange, 'topic', { durable: false }));
  const declared = await call(`queue.declare ${queue}`, ch.assertQueue(queue, { durable: false }));
  run.set('declare_ok', declared);
  run.check(declared.queue === queue && declared.messageCount === 0, `declare-ok ${JSON.stringify(declared)}`);
  await call(`queue.bind ${queue} ${BINDING}`, ch.bindQueue(queue, exchange, BINDING));

  const routed = [];
  for (let i = 0; i < count; i++) {
    const key = i % 2 === 0 ? `node.${i}.info` : `node.${i}.debug`;
    if (i % 2 === 0) routed.push(i);
    run.step(`publish ${i + 1} (${key})`);
    ch.publish(exchange, key, Buffer.from(JSON.stringify({ i, key })), {
      contentType: 'application/json',
      messageId: `p${i}`,
      timestamp: 1700000000 + i,
      headers: { i, origin: 'node-promise', ratio: i + 0.5, tags: ['a', i] },
    });
  }
  run.set('published', count);
  run.set('routed', routed.length);

  const verify = (msg, i, position) => {
    const key = `node.${i}.info`;
    const { fields, properties } = msg;
    run.check(
      fields.exchange === exchange && fields.routingKey === key,
      `${position}: exchange=${fields.exchange} routingKey=${fields.routingKey}, want ${exchange} ${key}`,
    );
    run.check(msg.content.toString() === JSON.stringify({ i, key }), `${position}: body ${msg.content}`);
    run.check(
      properties.messageId === `p${i}` && properties.timestamp === 1700000000 + i,
      `${position}: messageId=${properties.messageId} timestamp=${properties.timestamp}`,
    );
    const h = properties.headers || {};
    run.check(
      h.i === i && h.ratio === i + 0.5 && Array.isArray(h.tags) && h.tags[0] === 'a' && h.tags[1] === i,
      `${position}: headers i=${jsType(h.i)} ratio=${jsType(h.ratio)} tags=${jsType(h.tags)} ${JSON.stringify(h)}`,
    );
  };

  // basic.get: nothing may be in flight any more once an RPC on the same channel has answered, but
  // the publishes were not confirmed, so poll until the first routed message is there.
  let first = false;
  while (first === false) {
    first = await call('basic.get (first routed message)', ch.get(queue, { noAck: false }));
    if (first === false) await call('poll again', new Promise((resolve) => setTimeout(resolve, 10)));
  }
  run.set('get_first', deliveryInfo(first));
  verify(first, routed[0], 'basic.get');
  run.check(first.fields.deliveryTag === 1, `basic.get deliveryTag ${first.fields.deliveryTag}`);
  ch.ack(first);

  const inbox = new Inbox();
  await call('basic.qos 10', ch.prefetch(10));
  const ok = await call('basic.consume', ch.consume(queue, (msg) => inbox.push(msg), { consumerTag: CONSUMER_TAG }));
  run.check(ok.consumerTag === CONSUMER_TAG, `consume-ok ${JSON.stringify(ok)}`);
  let received = 0;
  for (const i of routed.slice(1)) {
    const msg = await inbox.next(run, `delivery of message ${i}`);
    received++;
    verify(msg, i, `delivery ${received}`);
    run.check(msg.fields.deliveryTag === received + 1, `delivery ${received} tag ${msg.fields.deliveryTag}`);
    if (received === routed.length - 1) run.set('last', deliveryInfo(msg));
    ch.ack(msg);
  }
  run.set('received', received);
  run.set('cancel_ok', await call('basic.cancel', ch.cancel(CONSUMER_TAG)));

  const empty = await call('basic.get (empty)', ch.get(queue));
  run.set('get_empty', empty);
  run.check(empty === false, `basic.get on the drained queue gave ${JSON.stringify(empty)}`);
  const after = await call(`queue.declare passive ${queue}`, ch.checkQueue(queue));
  run.set('ready_after_acks', after.messageCount);
  run.check(after.messageCount === 0 && after.consumerCount === 0, `after: ${JSON.stringify(after)}`);

  run.set('unbind_ok', await call('queue.unbind', ch.unbindQueue(queue, exchange, BINDING)));
  const deleted = await call(`queue.delete ${queue}`, ch.deleteQueue(queue));
  run.set('delete_ok', deleted);
  run.check(deleted.messageCount === 0, `queue.delete-ok ${JSON.stringify(deleted)}`);
  await call(`exchange.delete ${exchange}`, ch.deleteExchange(exchange));
  await call('channel.close', ch.close());
}

module.exports = {
  help: 'promise API: topic exchange, publish, basic.get, consume with manual acks',
  options: { count: { type: 'string', default: '20' } },
  run: scenario,
};
