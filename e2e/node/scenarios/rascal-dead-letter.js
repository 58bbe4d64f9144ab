// rascal-dead-letter: a dead-letter queue set up through rascal's queue options, fed by nacks without
// requeue, with the broker's x-death read back (by the test and by rascal itself).
//
// Topology (rascal config): direct exchange "<prefix>.x" routes "task" to "<prefix>.work", declared with
// options.arguments {'x-dead-letter-exchange': "<prefix>.dlx"} (no dead-letter routing key, so dead
// letters keep their routing keys); topic exchange "<prefix>.dlx" routes "#" to "<prefix>.dlq".
// Publication "replay" sends to "<prefix>.work" through the default exchange.
//
// "m1": the handler recovers with {strategy: 'nack'}: basic.nack requeue=false, the broker dead-letters it
// (x-death reason "rejected", exchange "<prefix>.x", routing-keys ["task"]).
// "m2": rascal's "republish with immediate nack": the handler recovers with {strategy: 'republish',
// immediateNack: true, restoreRoutingHeaders: false}; rascal republishes a copy to the work queue through
// the default exchange with headers.rascal.recovery["<prefix>.work"] = {immediateNack: true, xDeath:
// <its x-death entry for the work queue, none yet>} and the error, then acks the original. When the copy
// arrives rascal nacks it without calling the handler, and the broker dead-letters it (exchange "",
// routing-keys ["<prefix>.work"]). The DLQ subscriber replays it (broker.forward to "replay"): back in the
// work queue rascal compares the x-death entry the broker wrote with the one it saved, sees the message was
// dead-lettered since, drops the immediate nack and calls the handler, which acks it.
//
// data: names, work [{message_id, attempt, seen}] (every handler call), dead [seen] (DLQ arrivals, in
// order), ready_after {queue: messages ready once everything settled}, now_unix (when the DLQ had both).
'use strict';

const { createBroker, publish, subscribe, seen, Progress, readyCounts } = require('../lib/rascal');
const { within } = require('../lib/run');

async function scenario(run) {
  const names = { x: run.name('x'), work: run.name('work'), dlx: run.name('dlx'), dlq: run.name('dlq') };
  run.set('names', names);
  const work = [];
  const dead = [];
  const acked = [];
  const progress = new Progress(run);

  const { broker, nuke } = await createBroker(run, {
    exchanges: { [names.x]: { type: 'direct' }, [names.dlx]: { type: 'topic' } },
    queues: {
      [names.work]: { options: { durable: false, arguments: { 'x-dead-letter-exchange': names.dlx } } },
      [names.dlq]: { options: { durable: false } },
    },
    bindings: {
      work: { source: names.x, destination: names.work, bindingKey: 'task' },
      dead: { source: names.dlx, destination: names.dlq, bindingKey: '#' },
    },
    publications: { task: { exchange: names.x, routingKey: 'task' }, replay: { queue: names.work } },
    subscriptions: { work: { queue: names.work, prefetch: 1 }, dlq: { queue: names.dlq, prefetch: 1 } },
  });

  await subscribe(run, broker, 'dlq', {
    message: async (message, content, ackOrNack) => {
      const entry = seen(message);
      dead.push(entry);
      progress.changed();
      if (message.properties.messageId !== 'm2' || dead.filter((d) => d.properties.message_id === 'm2').length > 1) {
        ackOrNack();
        return;
      }
      try {
        run.step('rascal forward m2 from the dead-letter queue to replay');
        const publication = await within(run, broker.forward('replay', message), 'rascal forward m2');
        publication
          .on('success', () => ackOrNack())
          .on('error', (err) => ackOrNack(err, { strategy: 'nack', requeue: false }))
          .on('return', () => run.check(false, 'replayed m2 was returned (unroutable)'));
      } catch (err) {
        run.fail(err);
      }
    },
  });
  await subscribe(run, broker, 'work', {
    message: (message, content, ackOrNack) => {
      const id = message.properties.messageId;
      const attempt = work.filter((w) => w.message_id === id).length + 1;
      work.push({ message_id: id, attempt, seen: seen(message) });
      if (id === 'm1') {
        ackOrNack(new Error('m1 is rejected'), { strategy: 'nack' });
      } else if (attempt === 1) {
        ackOrNack(new Error('m2 is rejected'), {
          strategy: 'republish',
          immediateNack: true,
          restoreRoutingHeaders: false,
        });
      } else {
        acked.push(id);
        ackOrNack();
      }
      progress.changed();
    },
  });

  for (const id of ['m1', 'm2']) {
    await publish(run, broker, 'task', `${id} body`, { options: { messageId: id, headers: { origin: 'rascal' } } });
  }
  await progress.until(() => dead.length >= 2 && acked.length >= 1, 'm1 and m2 dead-lettered, m2 replayed and acked');
  run.set('now_unix', Math.floor(Date.now() / 1000));
  run.set('work', work);
  run.set('dead', dead);
  const ready = await readyCounts(run, [names.work, names.dlq]);
  run.set('ready_after', ready);
  await nuke();

  const calls = work.map((w) => `${w.message_id}#${w.attempt}`).join(' ');
  run.check(calls === 'm1#1 m2#1 m2#2', `handler calls ${calls}, want m1#1 m2#1 m2#2 (the copy nacked unseen)`);
  const arrivals = dead.map((d) => d.properties.message_id).join(' ');
  run.check(arrivals === 'm1 m2', `dead-letter queue got ${arrivals}, want m1 m2`);
  for (const entry of dead) {
    const xDeath = entry.headers && entry.headers['x-death'];
    run.check(
      xDeath && xDeath.type === 'Array' && xDeath.value.length === 1,
      `${entry.properties.message_id}: x-death ${JSON.stringify(xDeath)}, want an Array of one entry`,
    );
  }
  run.check(ready[names.work] === 0 && ready[names.dlq] === 0, `messages left ready: ${JSON.stringify(ready)}`);
}

module.exports = {
  help: 'rascal: a DLX from queue options; nack, republish with immediate nack, x-death read back and replayed',
  options: {},
  run: scenario,
};
