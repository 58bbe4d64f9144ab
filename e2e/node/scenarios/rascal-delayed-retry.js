// rascal-delayed-retry: rascal's documented delayed-retry loop ("Chaining Recovery Strategies" and
// examples/advanced in rascal's README): failed messages wait in a TTL queue, the broker dead-letters them
// back to the work queue, and after a number of attempts they are dead-lettered for good.
//
// Topology (rascal config; all exchanges topic):
//   "<prefix>.x"     --task-->            "<prefix>.work"  (x-dead-letter-exchange "<prefix>.dlx")
//   "<prefix>.delay" --delay-->           "<prefix>.wait"  (x-message-ttl --delay,
//                                                           x-dead-letter-exchange "<prefix>.retry")
//   "<prefix>.retry" --<prefix>.work.#--> "<prefix>.work"
//   "<prefix>.dlx"   --#-->               "<prefix>.dlq"
// Publication "retry_later" publishes to "<prefix>.delay" with CC ["delay"]. rascal's forward keeps the
// message's routing key ("task") and adds the CC "<queue>.<routing key>" ("<prefix>.work.task"), so the
// message reaches the wait queue by "delay" and, once expired and dead-lettered with all its routing keys
// (CC included), the work queue by "<prefix>.work.task".
//
// The work handler always fails and recovers with [{strategy: 'forward', publication: 'retry_later',
// attempts: --attempts}, {strategy: 'nack'}]: rascal counts the forwards in
// headers.rascal.recovery["<prefix>.work"].forwarded; once they reach --attempts it skips the forward and
// nacks (requeue=false), and the broker dead-letters the message to "<prefix>.dlq". Each handler call is
// timed (performance.now()), so the gaps between attempts can be compared with --delay.
//
// data: names, delay_ms, attempts (the --attempts option), calls [{message_id, forwarded, at_ms (since
// the publish), x_death (typed, as the handler saw it)}], gaps_ms, dead [seen(message)], now_unix (when
// the dead letter arrived), ready_after {queue: messages ready once everything settled}.
'use strict';

const { performance } = require('node:perf_hooks');
const { createBroker, publish, subscribe, seen, Progress, readyCounts } = require('../lib/rascal');
const { typed } = require('../lib/typed');

async function scenario(run, opts) {
  const delay = Number.parseInt(opts.delay, 10);
  const attempts = Number.parseInt(opts.attempts, 10);
  const names = {
    x: run.name('x'),
    work: run.name('work'),
    delay: run.name('delay'),
    wait: run.name('wait'),
    retry: run.name('retry'),
    dlx: run.name('dlx'),
    dlq: run.name('dlq'),
  };
  run.set('names', names);
  run.set('delay_ms', delay);
  run.set('attempts', attempts);
  const calls = [];
  const dead = [];
  const progress = new Progress(run);
  let publishedAt = 0;

  const queueOptions = (args) => ({ options: { durable: false, arguments: args } });
  const { broker, nuke } = await createBroker(run, {
    exchanges: Object.fromEntries([names.x, names.delay, names.retry, names.dlx].map((x) => [x, { type: 'topic' }])),
    queues: {
      [names.work]: queueOptions({ 'x-dead-letter-exchange': names.dlx }),
      [names.wait]: queueOptions({ 'x-message-ttl': delay, 'x-dead-letter-exchange': names.retry }),
      [names.dlq]: queueOptions({}),
    },
    bindings: {
      work: { source: names.x, destination: names.work, bindingKey: 'task' },
      wait: { source: names.delay, destination: names.wait, bindingKey: 'delay' },
      retry: { source: names.retry, destination: names.work, bindingKey: `${names.work}.#` },
      dead: { source: names.dlx, destination: names.dlq, bindingKey: '#' },
    },
    publications: {
      task: { exchange: names.x, routingKey: 'task' },
      retry_later: { exchange: names.delay, options: { CC: ['delay'] } },
    },
    subscriptions: { work: { queue: names.work }, dlq: { queue: names.dlq } },
  });

  await subscribe(run, broker, 'dlq', {
    message: (message, content, ackOrNack) => {
      dead.push(seen(message));
      run.set('now_unix', Math.floor(Date.now() / 1000));
      ackOrNack();
      progress.changed();
    },
  });
  await subscribe(run, broker, 'work', {
    message: (message, content, ackOrNack) => {
      const at = performance.now() - publishedAt;
      const recovery = message.properties.headers.rascal.recovery || {};
      calls.push({
        message_id: message.properties.messageId,
        forwarded: (recovery[names.work] || {}).forwarded || 0,
        at_ms: Math.round(at * 1000) / 1000,
        x_death: typed(message.properties.headers['x-death']),
      });
      ackOrNack(new Error(`attempt ${calls.length} failed`), [
        { strategy: 'forward', publication: 'retry_later', attempts },
        { strategy: 'nack' },
      ]);
      progress.changed();
    },
  });

  publishedAt = performance.now();
  await publish(run, broker, 'task', 'retry me', { options: { messageId: 'r1' } });
  await progress.until(() => dead.length >= 1, 'the message in the dead-letter queue');
  run.set('calls', calls);
  const gaps = calls.slice(1).map((c, i) => Math.round((c.at_ms - calls[i].at_ms) * 1000) / 1000);
  run.set('gaps_ms', gaps);
  run.set('dead', dead);
  const ready = await readyCounts(run, [names.work, names.wait, names.dlq]);
  run.set('ready_after', ready);
  await nuke();

  const forwarded = calls.map((c) => c.forwarded);
  const want = Array.from({ length: attempts + 1 }, (_, i) => i);
  run.check(
    JSON.stringify(forwarded) === JSON.stringify(want),
    `handler calls saw forwarded ${JSON.stringify(forwarded)}, want ${JSON.stringify(want)}`,
  );
  run.check(gaps.every((gap) => gap >= delay), `gaps between attempts ${JSON.stringify(gaps)} ms, want >= ${delay}`);
  run.check(dead.length === 1 && dead[0].properties.message_id === 'r1', `dead letters: ${JSON.stringify(dead)}`);
  run.check(Object.values(ready).every((n) => n === 0), `messages left ready: ${JSON.stringify(ready)}`);
}

module.exports = {
  help: 'rascal: delayed retries through a TTL wait queue dead-lettering back to the work queue, then a DLQ',
  options: { delay: { type: 'string', default: '200' }, attempts: { type: 'string', default: '3' } },
  run: scenario,
};
