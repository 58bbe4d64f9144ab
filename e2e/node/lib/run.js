// The state shared by a scenario and the CLI (the Node twin of e2e/go/src/ottermqe2e/main.go's `run`):
// the JSON result, the current step, cleanups, and the one-shot printer.
'use strict';

class Run {
  /**
   * @param {string} scenario subcommand name
   * @param {{url: string, prefix: string, timeoutMs: number}} opts
   */
  constructor(scenario, opts) {
    this.url = opts.url;
    this.prefix = opts.prefix;
    this.timeoutMs = opts.timeoutMs;
    this.tls = opts.tls || {}; // ca, cert, key buffers for amqps://
    this.external = Boolean(opts.external);
    this.deadline = Date.now() + opts.timeoutMs; // the scenario's overall deadline (like Go's ctx)
    this.res = { scenario, ok: false, failures: [], error: '', step: '', data: {} };
    this.cleanups = [];
    this.printed = false;
  }

  /** Record what the scenario is doing (reported on timeout or error). */
  step(text) {
    this.res.step = text;
  }

  /** data[key] = value */
  set(key, value) {
    this.res.data[key] = value;
  }

  /** Record a failure unless cond holds; returns cond. */
  check(cond, message) {
    if (!cond) this.res.failures.push(message);
    return Boolean(cond);
  }

  /** Record an unexpected error (the first one wins; later ones are appended to failures). */
  fail(err) {
    const text = describeError(err);
    if (this.res.error === '') this.res.error = text;
    else this.res.failures.push(`also: ${text}`);
  }

  /** An entity name derived from the prefix ("" gives the prefix itself). */
  name(suffix = '') {
    return suffix === '' ? this.prefix : `${this.prefix}.${suffix}`;
  }

  /** Run fn (sync or async) after the scenario, newest first. */
  defer(fn) {
    this.cleanups.push(fn);
  }

  /** Run the cleanups newest first, bounded by one second in total; errors are ignored. */
  async runCleanup() {
    const fns = this.cleanups.reverse();
    this.cleanups = [];
    const all = (async () => {
      for (const fn of fns) {
        try {
          await fn();
        } catch {
          // best effort: the scenario's outcome is already recorded
        }
      }
    })();
    let timer;
    await Promise.race([all, new Promise((resolve) => (timer = setTimeout(resolve, 1000)))]);
    clearTimeout(timer);
  }

  /** Print the result once; returns the exit status (failStatus if anything failed). */
  finish(failStatus) {
    this.res.ok = this.res.error === '' && this.res.failures.length === 0;
    if (!this.printed) {
      this.printed = true;
      process.stdout.write(`${JSON.stringify(this.res)}\n`);
    }
    return this.res.ok ? 0 : failStatus;
  }
}

/** amqplib errors carry code/classId/methodId when the broker closed something. */
function describeError(err) {
  if (err === null || err === undefined) return String(err);
  if (typeof err !== 'object') return String(err);
  const extra = [];
  if (err.code !== undefined) extra.push(`code=${err.code}`);
  if (err.classId !== undefined) extra.push(`classId=${err.classId}`);
  if (err.methodId !== undefined) extra.push(`methodId=${err.methodId}`);
  return `${err.name || 'Error'}: ${err.message}${extra.length ? ` (${extra.join(' ')})` : ''}`;
}

/** promise, or a rejection once the scenario's deadline (--timeout) has passed while waiting for what. */
function within(run, promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    const left = Math.max(run.deadline - Date.now(), 1);
    timer = setTimeout(() => reject(new Error(`timeout after ${run.timeoutMs} ms waiting for ${what}`)), left);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function redact(url) {
  return url.replace(/^(\w+:\/\/)[^@/]*@/, '$1***@');
}

module.exports = { Run, describeError, within, redact };
