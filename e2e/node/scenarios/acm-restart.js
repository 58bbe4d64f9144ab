// acm-restart: amqp-connection-manager across a broker restart, for a test that restarts the broker
// while this program waits (the `run_across_restart` protocol of e2e/client_programs.py).
//
// A connection manager for --url (reconnect every 200 ms) and one ChannelWrapper (a ConfirmChannel)
// whose setup declares the durable queue "<prefix>" and counts its runs; the wrapper consumes the queue
// (prefetch 10, ack each message) and amqp-connection-manager re-consumes by itself after a reconnect.
//
//   1. publish --before persistent messages "before-<i>" with sendToQueue (resolved on the broker's
//      confirm), receive them all, then queue.declare passive on the wrapper's channel (answered after
//      the acks sent before it: nothing ready, nothing unacked left to redeliver);
//   2. print "ready" on its own line and wait for a line on stdin (the test restarts the broker: every
//      connection is closed with 320 CONNECTION_FORCED and the manager reconnects by itself);
//   3. publish --after messages "after-<i>" (held by the wrapper until its channel is set up again, then
//      confirmed) and receive them;
//   4. passive declare again, cancel the consumer, delete the queue, close.
// Then the usual one JSON line.
//
// data: queue, before / after (the options), received [{body, redelivered}] in arrival order,
// received_before_restart, connects (manager 'connect' events), setups (setup runs), wrapper_connects,
// disconnects [{code, message}] (the error each 'disconnect' carried), connect_failures (count),
// confirmed_after (sendToQueue promises resolved after the restart), declare_before / declare_after
// ({messageCount, consumerCount}), delete_ok.
'use strict';

const acm = require('amqp-connection-manager');
const { within } = require('../lib/run');

/** Wait until cond() holds, re-checked whenever changed() is called; fails at the deadline. */
function waiter(run) {
  const waiting = [];
  return {
    changed: () => {
      for (const resolve of waiting.splice(0)) resolve();
    },
    until: (cond, what) => {
      run.step(`wait for ${what}`);
      const loop = async () => {
        while (!cond()) await new Promise((resolve) => waiting.push(resolve));
      };
      return within(run, loop(), what);
    },
  };
}

function stdinLine() {
  return new Promise((resolve) => {
    process.stdin.setEncoding('utf8');
    process.stdin.once('data', (chunk) => resolve(chunk));
    process.stdin.once('end', () => resolve(''));
  });
}

async function scenario(run, opts) {
  const before = Number.parseInt(opts.before, 10);
  const after = Number.parseInt(opts.after, 10);
  const queue = run.name();
  run.set('queue', queue);
  run.set('before', before);
  run.set('after', after);
  const received = [];
  const disconnects = [];
  let connects = 0;
  let connectFailures = 0;
  let setups = 0;
  let wrapperConnects = 0;
  const progress = waiter(run);

  const manager = acm.connect([run.url], {
    heartbeatIntervalInSeconds: 5,
    reconnectTimeInSeconds: 0.2,
    connectionOptions: {
      clientProperties: { connection_name: `ottermq-e2e-node ${run.res.scenario}` },
      timeout: run.timeoutMs,
      ...run.tls,
    },
  });
  run.defer(() => manager.close());
  manager.on('connect', () => {
    connects += 1;
    progress.changed();
  });
  manager.on('disconnect', ({ err }) => {
    disconnects.push({ code: err && err.code !== undefined ? err.code : null, message: err ? err.message : null });
    progress.changed();
  });
  manager.on('connectFailed', () => {
    connectFailures += 1;
  });

  const wrapper = manager.createChannel({
    name: run.res.scenario,
    setup: async (channel) => {
      setups += 1;
      await channel.assertQueue(queue, { durable: true });
    },
  });
  wrapper.on('error', (err) => run.check(false, `ChannelWrapper error: ${err.message}`));
  wrapper.on('connect', () => {
    wrapperConnects += 1;
  });
  const call = (what, promise) => {
    run.step(what);
    return within(run, promise, what);
  };
  await call('ChannelWrapper connect and setup', wrapper.waitForConnect());
  await call(
    `consume ${queue}`,
    wrapper.consume(
      queue,
      (msg) => {
        received.push({ body: msg.content.toString(), redelivered: msg.fields.redelivered });
        wrapper.ack(msg);
        progress.changed();
      },
      { prefetch: 10 },
    ),
  );

  const send = (body) => wrapper.sendToQueue(queue, Buffer.from(body), { persistent: true, messageId: body });
  await call(
    `publish ${before} messages (confirmed)`,
    Promise.all(Array.from({ length: before }, (_, i) => send(`before-${i}`))),
  );
  await progress.until(() => received.length >= before, `${before} messages before the restart`);
  const declareBefore = await call(`queue.declare passive ${queue}`, wrapper.checkQueue(queue));
  run.set('declare_before', { messageCount: declareBefore.messageCount, consumerCount: declareBefore.consumerCount });
  run.set('received_before_restart', received.length);

  run.step('ready: wait for a line on stdin while the broker restarts');
  process.stdout.write('ready\n');
  await stdinLine();
  process.stdin.pause();

  let confirmedAfter = 0;
  await call(
    `publish ${after} messages after the restart (confirmed once reconnected)`,
    Promise.all(
      Array.from({ length: after }, (_, i) =>
        send(`after-${i}`).then(() => {
          confirmedAfter += 1;
        }),
      ),
    ),
  );
  await progress.until(() => received.length >= before + after, `${after} messages after the restart`);
  const declareAfter = await call(`queue.declare passive ${queue} (after)`, wrapper.checkQueue(queue));
  run.set('declare_after', { messageCount: declareAfter.messageCount, consumerCount: declareAfter.consumerCount });
  run.set('received', received);
  run.set('connects', connects);
  run.set('setups', setups);
  run.set('wrapper_connects', wrapperConnects);
  run.set('disconnects', disconnects);
  run.set('connect_failures', connectFailures);
  run.set('confirmed_after', confirmedAfter);

  await call('cancel the consumer', wrapper.cancelAll());
  run.set('delete_ok', await call(`queue.delete ${queue}`, wrapper.deleteQueue(queue)));
  await call('ChannelWrapper close', wrapper.close());
  await call('connection manager close', manager.close());

  const bodies = received.map((r) => r.body);
  const want = [
    ...Array.from({ length: before }, (_, i) => `before-${i}`),
    ...Array.from({ length: after }, (_, i) => `after-${i}`),
  ];
  run.check(JSON.stringify(bodies) === JSON.stringify(want), `received ${JSON.stringify(bodies)}, want ${JSON.stringify(want)}`);
  run.check(connects >= 2 && disconnects.length >= 1, `connects ${connects}, disconnects ${disconnects.length}: no reconnect seen`);
  run.check(setups === connects, `setup ran ${setups} times for ${connects} connections`);
}

module.exports = {
  help: 'amqp-connection-manager: confirmed publish and consume, reconnect across a broker restart (stdin protocol)',
  options: { before: { type: 'string', default: '5' }, after: { type: 'string', default: '5' } },
  run: scenario,
};
