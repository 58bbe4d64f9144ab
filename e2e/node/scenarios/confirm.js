// confirm: a ConfirmChannel (promise API). --count publishes to "<prefix>", each with a callback, then
// waitForConfirms() resolves; every callback got null, tags acked in order, and the queue holds --count.
// Then a queue "<prefix>.full" with x-max-length 1 and x-overflow reject-publish: the first publish is
// acked, the second nacked by the broker, so its callback gets an Error and waitForConfirms() rejects.
//
// data: queue, full_queue, confirm_callbacks (null or the error message, in publish order),
// broker_acks / broker_nacks ({deliveryTag, multiple} frames as received), wait_for_confirms
// ("resolved" or the rejection's message), ready_after_confirms, overflow {callbacks, wait_for_confirms,
// broker_acks, broker_nacks, ready}.
'use strict';

const { connect, deleteLater, watch } = require('../lib/amqp');
const { within } = require('../lib/run');

async function publishAll(run, ch, queue, count, label) {
  const callbacks = new Array(count).fill('pending');
  const acks = [];
  const nacks = [];
  const onAck = (f) => acks.push({ deliveryTag: f.deliveryTag, multiple: f.multiple });
  const onNack = (f) => nacks.push({ deliveryTag: f.deliveryTag, multiple: f.multiple });
  ch.on('ack', onAck);
  ch.on('nack', onNack);
  for (let i = 0; i < count; i++) {
    run.step(`publish ${label} ${i + 1}`);
    ch.sendToQueue(queue, Buffer.from(`${label}-${i}`), { messageId: `${label}-${i}` }, (err) => {
      callbacks[i] = err === null ? null : String(err.message);
    });
  }
  run.step(`waitForConfirms (${label})`);
  let outcome;
  try {
    await within(run, ch.waitForConfirms(), `waitForConfirms (${label})`);
    outcome = 'resolved';
  } catch (err) {
    if (String(err.message).startsWith('timeout after')) throw err;
    outcome = String(err.message);
  }
  ch.removeListener('ack', onAck);
  ch.removeListener('nack', onNack);
  return { callbacks, acks, nacks, outcome };
}

async function scenario(run, opts) {
  const count = Number.parseInt(opts.count, 10);
  const conn = await connect(run);
  run.step('create confirm channel');
  const ch = await within(run, conn.createConfirmChannel(), 'create confirm channel');
  watch(run, 'channel', ch);
  const queue = run.name();
  const full = run.name('full');
  run.set('queue', queue);
  run.set('full_queue', full);
  deleteLater(run, conn, [queue, full]);

  run.step(`queue.declare ${queue}`);
  await within(run, ch.assertQueue(queue, { durable: false }), 'queue.declare');
  const plain = await publishAll(run, ch, queue, count, 'plain');
  run.set('confirm_callbacks', plain.callbacks);
  run.set('broker_acks', plain.acks);
  run.set('broker_nacks', plain.nacks);
  run.set('wait_for_confirms', plain.outcome);
  run.check(plain.outcome === 'resolved', `waitForConfirms: ${plain.outcome}`);
  run.check(
    plain.callbacks.every((c) => c === null),
    `callbacks ${JSON.stringify(plain.callbacks)}`,
  );
  run.check(plain.nacks.length === 0, `nacks ${JSON.stringify(plain.nacks)}`);
  const last = plain.acks.length ? plain.acks[plain.acks.length - 1].deliveryTag : 0;
  run.check(last === count, `last ack for tag ${last}, want ${count}`);
  run.step(`queue.declare passive ${queue}`);
  const ready = await within(run, ch.checkQueue(queue), 'passive declare');
  run.set('ready_after_confirms', ready.messageCount);
  run.check(ready.messageCount === count, `${ready.messageCount} ready after confirms, want ${count}`);

  run.step(`queue.declare ${full} (x-max-length 1, reject-publish)`);
  await within(
    run,
    ch.assertQueue(full, { durable: false, arguments: { 'x-max-length': 1, 'x-overflow': 'reject-publish' } }),
    'queue.declare full',
  );
  const overflow = await publishAll(run, ch, full, 2, 'overflow');
  run.step(`queue.declare passive ${full}`);
  overflow.ready = (await within(run, ch.checkQueue(full), 'passive declare full')).messageCount;
  run.set('overflow', overflow);
  run.check(
    overflow.callbacks[0] === null && overflow.callbacks[1] === 'message nacked',
    `overflow callbacks ${JSON.stringify(overflow.callbacks)}`,
  );
  run.check(overflow.outcome === 'message nacked', `overflow waitForConfirms: ${overflow.outcome}`);
  run.check(overflow.ready === 1, `${overflow.ready} ready in ${full}, want 1`);
  run.step('channel.close');
  await within(run, ch.close(), 'channel.close');
}

module.exports = {
  help: 'ConfirmChannel: publish callbacks + waitForConfirms, and a reject-publish nack',
  options: { count: { type: 'string', default: '50' } },
  run: scenario,
};
