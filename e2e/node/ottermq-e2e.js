#!/usr/bin/env node
// ottermq-e2e (Node): drives an AMQP 0-9-1 broker with amqplib, one scenario per subcommand, for
// e2e/test_node_client.py and e2e/test_mixed_clients.py. It runs the same way against ottermq and
// RabbitMQ. The Node twin of e2e/go/src/ottermqe2e (same JSON, same exit codes).
//
// Install (amqplib pinned in package.json, exact tree in package-lock.json):
//
//     npm ci --prefix e2e/node          # or: bash .ci/install-node.sh
//
// Usage:
//
//     node e2e/node/ottermq-e2e.js <scenario> --url amqp://guest:guest@127.0.0.1:5672/%2F \
//         --prefix e2e.node.1234 [--timeout 5000] [scenario options]
//     ... --url amqps://localhost:5671/%2F --ca ca.pem [--cert c.pem --key c.key --external]
//
// Scenarios: see `node e2e/node/ottermq-e2e.js --help` and the header of each file in scenarios/.
//
// Every run prints exactly one JSON object on stdout:
//
//     {"scenario": "...", "ok": true, "failures": [], "error": "", "step": "...", "data": {...}}
//
// "failures" lists the checks the program itself found wrong, "error" an unexpected client error or the
// timeout, "step" what it was doing last. Exit status: 0 ok, 1 failures or error, 2 usage, 3 the
// watchdog fired (a promise never settled). Names derive from --prefix (the prefix itself and
// "<prefix>.<suffix>"); the program deletes what it declared before exiting.
'use strict';

const { parseArgs } = require('node:util');
const { Run } = require('./lib/run');

const SCENARIOS = {
  'callback-pubsub': require('./scenarios/callback-pubsub'),
  'promise-pubsub': require('./scenarios/promise-pubsub'),
  confirm: require('./scenarios/confirm'),
  'ttl-dlx': require('./scenarios/ttl-dlx'),
  'dead-letter': require('./scenarios/dead-letter'),
  'rascal-redeliveries': require('./scenarios/rascal-redeliveries'),
  'rascal-delayed-retry': require('./scenarios/rascal-delayed-retry'),
  'rascal-dead-letter': require('./scenarios/rascal-dead-letter'),
  'acm-restart': require('./scenarios/acm-restart'),
};

const COMMON_OPTIONS = {
  url: { type: 'string', default: 'amqp://guest:guest@127.0.0.1:5672/%2F' },
  prefix: { type: 'string' },
  timeout: { type: 'string', default: '5000' }, // ms: overall deadline for the scenario
  ca: { type: 'string' }, // amqps:// URLs: CA bundle (PEM) the server certificate is checked against
  cert: { type: 'string' }, // amqps:// URLs: client certificate (PEM)
  key: { type: 'string' }, // amqps:// URLs: its key (PEM)
  external: { type: 'boolean', default: false }, // SASL EXTERNAL: the client certificate names the user
  help: { type: 'boolean', short: 'h', default: false },
};

function usage(stream = process.stderr) {
  stream.write('usage: ottermq-e2e.js <scenario> --url URL --prefix NAME [--timeout MS] [options]\nscenarios:\n');
  for (const name of Object.keys(SCENARIOS).sort()) {
    const sc = SCENARIOS[name];
    const opts = Object.entries(sc.options || {})
      .map(([k, v]) => `--${k} (${v.default})`)
      .join(' ');
    stream.write(`  ${name.padEnd(16)} ${sc.help}${opts ? `\n  ${''.padEnd(16)} ${opts}` : ''}\n`);
  }
}

async function main() {
  const [name, ...argv] = process.argv.slice(2);
  if (name === undefined || name === '-h' || name === '--help') {
    usage(name === undefined ? process.stderr : process.stdout);
    return name === undefined ? 2 : 0;
  }
  const scenario = SCENARIOS[name];
  if (scenario === undefined) {
    process.stderr.write(`unknown scenario ${JSON.stringify(name)}\n`);
    usage();
    return 2;
  }
  let values;
  try {
    ({ values } = parseArgs({ args: argv, options: { ...COMMON_OPTIONS, ...(scenario.options || {}) }, strict: true }));
  } catch (err) {
    process.stderr.write(`${name}: ${err.message}\n`);
    usage();
    return 2;
  }
  if (values.help) {
    usage(process.stdout);
    return 0;
  }
  const timeoutMs = Number.parseInt(values.timeout, 10);
  if (!values.prefix || !Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    process.stderr.write(`${name}: --prefix is required and --timeout must be a positive number of ms\n`);
    return 2;
  }

  const fs = require('node:fs');
  const tls = {};
  for (const option of ['ca', 'cert', 'key']) {
    if (values[option]) tls[option] = fs.readFileSync(values[option]);
  }
  const run = new Run(name, { url: values.url, prefix: values.prefix, timeoutMs, tls, external: values.external });
  // A client call whose promise never settles (and that no `within` guards) would leave Node idle or
  // waiting forever: print what we have and exit instead of hanging the test suite.
  const watchdog = setTimeout(() => {
    run.res.error = `watchdog: no progress within ${timeoutMs + 2000} ms (a client call never settled)`;
    process.exit(run.finish(3));
  }, timeoutMs + 2000);
  const onCrash = (err) => {
    run.fail(err);
    process.exit(run.finish(1));
  };
  process.on('uncaughtException', onCrash);
  process.on('unhandledRejection', onCrash);

  try {
    await scenario.run(run, values);
  } catch (err) {
    run.fail(err);
  }
  await run.runCleanup();
  clearTimeout(watchdog);
  return run.finish(1);
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stdout.write(`${JSON.stringify({ scenario: process.argv[2], ok: false, failures: [], error: String(err), step: '', data: {} })}\n`);
    process.exit(1);
  },
);
