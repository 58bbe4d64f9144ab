// rascal-redeliveries: rascal's redelivery limit, counted from the broker's `redelivered` flag.
//
// Topology (rascal config): direct exchange "<prefix>.x" routes "task" to the work queue "<prefix>.work";
// direct exchange "<prefix>.dead" routes "task" to "<prefix>.dlq". Subscription "work" (prefetch 1) has
// redeliveries {limit: --limit, counter: "recorded"}: a counter of rascal's inMemory type, wrapped to
// record every incrementAndGet(key) and its answer. rascal asks the counter only for deliveries the broker
// flags redelivered (keyed "<subscription>/<messageId>") and puts the answer in
// headers.rascal.redeliveries (0 for a first delivery).
//
// The handler fails and recovers with {strategy: 'nack', requeue: true}: basic.nack requeue=true, so the
// broker delivers the message again with redelivered=true. Once the count exceeds the limit rascal emits
// redeliveries_exceeded instead of message; that handler recovers with [{strategy: 'forward', publication:
// 'dead', attempts: 1, restoreRoutingHeaders: false}, {strategy: 'nack'}]: rascal publishes a copy to
// "<prefix>.dead" (error and recovery details in headers.rascal), waits for the confirm, then acks the
// original. "m1" always fails: the handler sees it limit+1 times, the next delivery exceeds the limit.
// "m2" fails once, then is acked (its count is its own).
//
// data: names, limit, attempts [{message_id, redeliveries, redelivered, body}], exceeded [{message_id,
// redeliveries, redelivered, error}], counter [[key, value]], acked [message_id], dead [seen(message)],
// ready_after {queue: messages ready once everything settled}.
'use strict';

const { createBroker, publish, subscribe, seen, Progress, readyCounts, rascal } = require('../lib/rascal');

async function scenario(run, opts) {
  const limit = Number.parseInt(opts.limit, 10);
  const names = { x: run.name('x'), work: run.name('work'), dead: run.name('dead'), dlq: run.name('dlq') };
  run.set('names', names);
  run.set('limit', limit);
  const attempts = [];
  const exceeded = [];
  const counter = [];
  const acked = [];
  const dead = [];
  const progress = new Progress(run);

  const recorded = (options) => {
    const inner = rascal.counters.inMemory(options);
    return {
      incrementAndGet(key, next) {
        inner.incrementAndGet(key, (err, value) => {
          counter.push([key, value]);
          next(err, value);
        });
      },
    };
  };
  const { broker, nuke } = await createBroker(
    run,
    {
      exchanges: { [names.x]: { type: 'direct' }, [names.dead]: { type: 'direct' } },
      queues: { [names.work]: { options: { durable: false } }, [names.dlq]: { options: { durable: false } } },
      bindings: {
        work: { source: names.x, destination: names.work, bindingKey: 'task' },
        dead: { source: names.dead, destination: names.dlq, bindingKey: 'task' },
      },
      publications: { task: { exchange: names.x, routingKey: 'task' }, dead: { exchange: names.dead } },
      subscriptions: {
        work: { queue: names.work, prefetch: 1, redeliveries: { limit, counter: 'recorded' } },
        dlq: { queue: names.dlq },
      },
    },
    {
      redeliveries: { counters: { recorded: { type: 'recorded', size: 100 } } },
      components: { counters: { recorded } },
    },
  );

  await subscribe(run, broker, 'dlq', {
    message: (message, content, ackOrNack) => {
      dead.push(seen(message));
      ackOrNack();
      progress.changed();
    },
  });
  await subscribe(run, broker, 'work', {
    message: (message, content, ackOrNack) => {
      const id = message.properties.messageId;
      attempts.push({
        message_id: id,
        redeliveries: message.properties.headers.rascal.redeliveries,
        redelivered: message.fields.redelivered,
        body: content,
      });
      const tries = attempts.filter((a) => a.message_id === id).length;
      if (id === 'm2' && tries === 2) {
        acked.push(id);
        ackOrNack();
      } else {
        ackOrNack(new Error(`${id} attempt ${tries} failed`), { strategy: 'nack', requeue: true });
      }
      progress.changed();
    },
    redeliveries_exceeded: (err, message, ackOrNack) => {
      exceeded.push({
        message_id: message.properties.messageId,
        redeliveries: message.properties.headers.rascal.redeliveries,
        redelivered: message.fields.redelivered,
        error: err.message,
      });
      ackOrNack(err, [
        { strategy: 'forward', publication: 'dead', attempts: 1, restoreRoutingHeaders: false },
        { strategy: 'nack' },
      ]);
      progress.changed();
    },
  });

  for (const id of ['m1', 'm2']) {
    await publish(run, broker, 'task', `${id} body`, { options: { messageId: id } });
  }
  await progress.until(() => dead.length >= 1 && acked.length >= 1, 'm1 in the dead-letter queue and m2 acked');
  run.set('attempts', attempts);
  run.set('exceeded', exceeded);
  run.set('counter', counter);
  run.set('acked', acked);
  run.set('dead', dead);
  const ready = await readyCounts(run, [names.work, names.dlq]);
  run.set('ready_after', ready);
  await nuke();

  const of = (id) => attempts.filter((a) => a.message_id === id);
  const want = Array.from({ length: limit + 1 }, (_, i) => i);
  run.check(
    JSON.stringify(of('m1').map((a) => a.redeliveries)) === JSON.stringify(want),
    `m1: handler saw redeliveries ${JSON.stringify(of('m1').map((a) => a.redeliveries))}, want ${JSON.stringify(want)}`,
  );
  run.check(
    JSON.stringify(of('m2').map((a) => a.redeliveries)) === '[0,1]',
    `m2: handler saw redeliveries ${JSON.stringify(of('m2').map((a) => a.redeliveries))}, want [0,1]`,
  );
  run.check(
    exceeded.length === 1 && exceeded[0].message_id === 'm1' && exceeded[0].redeliveries === limit + 1,
    `redeliveries_exceeded: ${JSON.stringify(exceeded)}, want m1 once with ${limit + 1}`,
  );
  run.check(
    dead.length === 1 && dead[0].properties.message_id === 'm1' && dead[0].body === 'm1 body',
    `dead letters: ${JSON.stringify(dead.map((d) => d.properties.message_id))}, want [m1]`,
  );
  run.check(
    ready[names.work] === 0 && ready[names.dlq] === 0,
    `messages left ready: ${JSON.stringify(ready)}`,
  );
}

module.exports = {
  help: 'rascal: a subscription redelivery limit (nack+requeue until exceeded, then forward to a dead-letter exchange)',
  options: { limit: { type: 'string', default: '3' } },
  run: scenario,
};
