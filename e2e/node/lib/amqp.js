// Connecting and cleaning up with either amqplib API, the same way in every scenario.
'use strict';

const amqplib = require('amqplib');
const amqpCallback = require('amqplib/callback_api');
const { describeError, redact, within } = require('./run');

function connectOptions(run) {
  const options = {
    clientProperties: { connection_name: `ottermq-e2e-node ${run.res.scenario}` },
    timeout: run.timeoutMs, // socket connect timeout
    ...run.tls, // amqps://: ca, cert, key (passed to tls.connect)
  };
  if (run.external) options.credentials = amqplib.credentials.external();
  return options;
}

/** Watch a connection or channel: an 'error' the scenario did not expect becomes a failure. */
function watch(run, what, emitter) {
  emitter.on('error', (err) => {
    if (emitter.expectError) return;
    run.check(false, `${what} error: ${describeError(err)}`);
  });
}

/** Promise API connection, closed after the scenario. */
async function connect(run) {
  run.step(`connect ${redact(run.url)}`);
  const conn = await within(run, amqplib.connect(run.url, connectOptions(run)), 'connect');
  watch(run, 'connection', conn);
  run.defer(() => conn.close());
  return conn;
}

/** Callback API connection (wrapped in a promise only to sequence the scenario), closed afterwards. */
async function connectCallback(run) {
  run.step(`connect (callback API) ${redact(run.url)}`);
  const conn = await within(run, callback((cb) => amqpCallback.connect(run.url, connectOptions(run), cb)), 'connect');
  watch(run, 'connection', conn);
  run.defer(() => callback((cb) => conn.close(cb)));
  return conn;
}

/** Run fn(cb) and settle with the node-style callback's (err, value). */
function callback(fn) {
  return new Promise((resolve, reject) => {
    fn((err, value) => (err ? reject(err) : resolve(value)));
  });
}

/** Delete queues, then exchanges, after the scenario, each on a fresh channel of conn (promise API). */
function deleteLater(run, conn, queues, exchanges = []) {
  run.defer(async () => {
    for (const [kind, names] of [
      ['deleteQueue', queues],
      ['deleteExchange', exchanges],
    ]) {
      for (const name of names) {
        try {
          const ch = await conn.createChannel();
          ch.expectError = true;
          ch.on('error', () => {});
          await ch[kind](name);
          await ch.close();
        } catch {
          // already gone, or the connection is closed
        }
      }
    }
  });
}

module.exports = { amqplib, amqpCallback, connect, connectCallback, callback, deleteLater, watch };

/**
 * Deliveries in arrival order: a consumer callback pushes, the scenario awaits them one by one.
 * A consumer cancelled by the broker pushes null (amqplib's way of saying so).
 */
class Inbox {
  constructor() {
    this.items = [];
    this.waiters = [];
  }

  push(msg) {
    const waiter = this.waiters.shift();
    if (waiter) waiter(msg);
    else this.items.push(msg);
  }

  /** The next delivery, failing at the scenario's deadline. */
  next(run, what) {
    run.step(`wait for ${what}`);
    if (this.items.length > 0) return Promise.resolve(this.items.shift());
    return within(
      run,
      new Promise((resolve) => this.waiters.push(resolve)),
      what,
    ).then((msg) => {
      if (msg === null) throw new Error(`consumer cancelled by the broker while waiting for ${what}`);
      return msg;
    });
  }

  /** The first delivery that arrives within ms, or undefined (for "nothing more arrives" checks). */
  async nothingWithin(ms) {
    if (this.items.length > 0) return this.items.shift();
    let resolveWaiter;
    const arrived = new Promise((resolve) => {
      resolveWaiter = resolve;
      this.waiters.push(resolve);
    });
    let timer;
    const quiet = new Promise((resolve) => (timer = setTimeout(() => resolve(undefined), ms)));
    const got = await Promise.race([arrived, quiet]);
    clearTimeout(timer);
    const index = this.waiters.indexOf(resolveWaiter);
    if (index >= 0) this.waiters.splice(index, 1);
    return got;
  }
}

module.exports.Inbox = Inbox;
