#!/usr/bin/env node
// Runs a command while holding a lockmesh lock.
//
//   node lock-and-run.mjs [--url URL] [--wait SECONDS] [--session-ttl SECONDS]
//                         [--grace SECONDS] KEY -- CMD [ARG...]
//
// Takes the lock KEY through the agent at URL (default: $LOCKMESH_URL, else
// the agent's default unix socket), waiting at most --wait seconds for it
// (default 0: try once), then runs CMD
// with LOCKMESH_KEY and LOCKMESH_TOKEN (the fencing token: pass it to every
// write) added to its environment, and releases the lock when CMD exits.
// If the lease is lost while CMD runs, or can no longer be proved valid
// (its validUntil comes within a tenth of its TTL without a refresh), CMD's
// process group gets SIGTERM, then SIGKILL after --grace or before
// validUntil, whichever comes first.
//
// Exit status: CMD's (128+N if signal N killed it); 69 the agent could not
// be reached or no majority answered; 75 the lock was not acquired within
// --wait; 76 the lease was lost while CMD ran; 127 CMD could not be run.

import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import { parseArgs } from 'node:util';
import { Client, LockedError, NoQuorumError, NotReadyError, TransportError } from '../lockmesh.mjs';

const EXIT_UNAVAILABLE = 69;
const EXIT_TIMEOUT = 75;
const EXIT_LOST = 76;
const EXIT_NOT_FOUND = 127;

// seconds is a command-line number of seconds, in milliseconds.
function seconds(name, s) {
  const v = Number(s);
  if (!Number.isFinite(v) || v < 0) throw new RangeError(`--${name} ${s}: want seconds`);
  return v * 1000;
}

async function main(argv) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      url: { type: 'string' },
      wait: { type: 'string', default: '0' },
      'session-ttl': { type: 'string', default: '10' },
      grace: { type: 'string', default: '2' },
    },
  });
  const [key, ...cmd] = positionals;
  if (!key || cmd.length === 0) {
    console.error('usage: lock-and-run.mjs [--url URL] [--wait S] [--session-ttl S] [--grace S] KEY -- CMD [ARG...]');
    return 64;
  }
  const client = new Client({ url: values.url });
  let lease;
  try {
    lease = await client.lock(key, { wait: seconds('wait', values.wait), sessionTTL: seconds('session-ttl', values['session-ttl']) });
  } catch (e) {
    if (e instanceof LockedError) {
      console.error(`lock-and-run: ${key} is held by ${e.holder}`);
      return EXIT_TIMEOUT;
    }
    if (e instanceof TransportError || e instanceof NoQuorumError || e instanceof NotReadyError) {
      console.error(`lock-and-run: ${e.message}`);
      return EXIT_UNAVAILABLE;
    }
    throw e;
  }
  try {
    return await run(cmd, lease, seconds('grace', values.grace));
  } finally {
    await lease.release().catch((e) => console.error(`lock-and-run: releasing: ${e.message}`));
  }
}

function run(cmd, lease, graceMs) {
  return new Promise((resolve) => {
    const child = spawn(cmd[0], cmd.slice(1), {
      stdio: 'inherit',
      detached: true, // its own process group: a loss stops all of it
      env: { ...process.env, LOCKMESH_KEY: lease.key, LOCKMESH_TOKEN: String(lease.token) },
    });
    const group = (sig) => {
      try {
        process.kill(-child.pid, sig);
      } catch {
        // gone already
      }
    };
    const forward = (sig) => group(sig);
    for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, forward);
    const margin = Math.max(lease.ttl / 10, 50);
    let lost = false;
    let check;
    let kill;
    const stop = () => {
      if (lost) return;
      lost = true;
      console.error(`lock-and-run: lease on ${lease.key} lost (${lease.lostReason ?? 'not refreshed in time'}): stopping the command`);
      group('SIGTERM');
      kill = setTimeout(() => group('SIGKILL'), Math.max(0, Math.min(graceMs, lease.validUntil - margin / 4 - performance.now())));
    };
    const watch = () => {
      const left = lease.remaining();
      if (lease.lost || left <= margin) return stop();
      check = setTimeout(watch, Math.min(left - margin, 100));
    };
    lease.once('lost', stop);
    watch();
    const done = (code) => {
      clearTimeout(check);
      clearTimeout(kill);
      for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.off(sig, forward);
      resolve(code);
    };
    child.on('error', (e) => {
      console.error(`lock-and-run: ${cmd[0]}: ${e.message}`);
      done(EXIT_NOT_FOUND);
    });
    child.on('exit', (code, signal) => {
      if (lost) return done(EXIT_LOST);
      done(signal ? 128 + constants.signals[signal] : code);
    });
  });
}

process.exitCode = await main(process.argv.slice(2));
