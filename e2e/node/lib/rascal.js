// What the rascal-* scenarios share (not a scenario itself): a rascal broker for --url built from the
// scenario's own topology (one vhost: exchanges, queues, bindings, publications, subscriptions) on top of
// rascal's defaults, publishing that waits for the confirm, subscribing that waits for basic.consume-ok,
// a JSON-safe record of what a subscriber saw, and passive declares through plain amqplib.
//
// rascal decorates every message it delivers: before a handler runs it adds a `rascal` table to
// message.properties.headers (originalQueue, originalVhost, redeliveries) on top of whatever `rascal`
// table the message carried on the wire (republish/forward put error, recovery and routing details there).
// `seen(message)` prints that table apart (`rascal`, plain JSON) from the other headers (`headers`, typed
// as amqplib decoded them, lib/typed.js).
'use strict';

const rascal = require('rascal');
const { connect, watch } = require('./amqp');
const { deliveryInfo, typedTable } = require('./typed');
const { describeError, within } = require('./run');

/** rascal's connection object for run.url (rascal rebuilds the URL from these parts) and the vhost name. */
function connectionConfig(run) {
  const url = new URL(run.url);
  const tls = url.protocol === 'amqps:';
  return {
    vhost: url.pathname.length > 1 ? decodeURIComponent(url.pathname.slice(1)) : '/',
    connection: {
      protocol: tls ? 'amqps' : 'amqp',
      hostname: url.hostname,
      port: Number(url.port) || (tls ? 5671 : 5672),
      user: decodeURIComponent(url.username || 'guest'),
      password: decodeURIComponent(url.password || 'guest'),
      socketOptions: {
        clientProperties: { connection_name: `ottermq-e2e-node ${run.res.scenario}` },
        timeout: run.timeoutMs,
        ...run.tls,
      },
    },
  };
}

/**
 * A BrokerAsPromised for `definition` (one vhost's exchanges, queues, bindings, publications and
 * subscriptions) on rascal's default config; `redeliveries` and `components` go to rascal as they are.
 * Broker errors become failures; `nuke()` deletes what the topology declared (also run as a cleanup).
 */
async function createBroker(run, definition, { redeliveries, components } = {}) {
  const { vhost, connection } = connectionConfig(run);
  const config = rascal.withDefaultConfig({
    vhosts: { [vhost]: { connection, ...definition } },
    // a cancelled subscription waits this long for unacknowledged messages before its channel closes
    defaults: { subscriptions: { closeTimeout: 500 } },
    ...(redeliveries ? { redeliveries } : {}),
  });
  run.step('rascal BrokerAsPromised.create (connect, assert the topology)');
  const broker = await within(run, rascal.BrokerAsPromised.create(config, components || {}), 'rascal broker');
  broker.on('error', (err) => run.check(false, `rascal broker error: ${describeError(err)}`));
  let nuking;
  const nuke = () => {
    nuking = nuking || broker.nuke();
    return nuking;
  };
  run.defer(nuke);
  return {
    broker,
    vhost,
    nuke: () => {
      run.step('rascal broker.nuke (delete the topology, close the connection)');
      return within(run, nuke(), 'rascal broker.nuke');
    },
  };
}

/** Publish through a rascal publication and wait for the broker's confirm; a return is a failure. */
async function publish(run, broker, name, content, overrides = {}) {
  run.step(`rascal publish ${name}`);
  const publication = await within(run, broker.publish(name, content, overrides), `rascal publish ${name}`);
  return within(
    run,
    new Promise((resolve, reject) => {
      publication
        .on('success', resolve)
        .on('error', reject)
        .on('return', (message) => {
          run.check(false, `publication ${name}: message ${message.properties.messageId} was returned (unroutable)`);
        });
    }),
    `confirm of a publish to ${name}`,
  );
}

/**
 * Subscribe with the given handlers ({event: fn}; rascal starts consuming when 'message' is added) and
 * wait until the consumer is set up. Subscription errors become failures.
 */
async function subscribe(run, broker, name, handlers) {
  run.step(`rascal subscribe ${name}`);
  const session = await within(run, broker.subscribe(name), `rascal subscribe ${name}`);
  session.on('error', (err) => run.check(false, `subscription ${name} error: ${describeError(err)}`));
  const subscribed = new Promise((resolve) => session.once('subscribed', resolve));
  for (const [event, fn] of Object.entries(handlers)) session.on(event, fn);
  await within(run, subscribed, `subscription ${name} to start consuming`);
  return session;
}

/** What a handler saw: deliveryInfo with rascal's table apart (`rascal`) from the typed other headers. */
function seen(message) {
  const info = deliveryInfo(message);
  const { rascal: table, ...others } = message.properties.headers || {};
  info.headers = typedTable(others);
  info.rascal = table === undefined ? null : JSON.parse(JSON.stringify(table));
  return info;
}

/** Wakes up `until` waiters whenever the scenario records something (call `changed()` after recording). */
class Progress {
  constructor(run) {
    this.run = run;
    this.waiters = [];
  }

  changed() {
    for (const waiter of this.waiters.splice(0)) waiter();
  }

  /** Resolves once done() holds (checked now and after every changed()); fails at the deadline. */
  until(done, what) {
    this.run.step(`wait for ${what}`);
    const wait = async () => {
      while (!done()) await new Promise((resolve) => this.waiters.push(resolve));
    };
    return within(this.run, wait(), what);
  }
}

/** {queue: messages ready} by passive declares on a plain amqplib connection (closed at cleanup). */
async function readyCounts(run, queues) {
  const conn = await connect(run);
  const ch = await within(run, conn.createChannel(), 'create channel');
  watch(run, 'channel', ch);
  const counts = {};
  for (const queue of queues) {
    run.step(`queue.declare passive ${queue}`);
    counts[queue] = (await within(run, ch.checkQueue(queue), `queue.declare passive ${queue}`)).messageCount;
  }
  return counts;
}

module.exports = { createBroker, publish, subscribe, seen, Progress, readyCounts, rascal };
