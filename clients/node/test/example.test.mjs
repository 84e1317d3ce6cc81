// Tests of examples/lock-and-run.mjs against live agents (see
// lockmesh.test.mjs for the environment they need).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Client } from '../lockmesh.mjs';
import { DEADLINE, URLS, behindItsBack, need, within } from './live.mjs';

const EXAMPLE = fileURLToPath(new URL('../examples/lock-and-run.mjs', import.meta.url));

// runExample starts the example on key with a Node one-liner as CMD.
function runExample(t, key, code) {
  const child = spawn(process.execPath, [EXAMPLE, '--url', URLS[0], '--session-ttl', '5', key, '--',
    process.execPath, '-e', code], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const exited = once(child, 'exit').then(([code]) => ({ code, stderr }));
  return { child, exited, lines: createInterface({ input: child.stdout })[Symbol.asyncIterator]() };
}

test('runs the command with the key and the token, then releases', async (t) => {
  if (!need(t, URLS.length > 0, 'LOCKMESH_TEST_URLS')) return;
  const key = `nodetest/${randomBytes(5).toString('hex')}/run`;
  const run = runExample(t, key, 'console.log(process.env.LOCKMESH_KEY, process.env.LOCKMESH_TOKEN)');
  const line = (await within(run.lines.next(), 'the command\'s output')).value;
  const { code, stderr } = await within(run.exited, 'the example\'s exit');
  assert.equal(code, 0, stderr);
  const [gotKey, token] = line.split(' ');
  assert.equal(gotKey, key);
  const h = await new Client({ url: URLS[1 % URLS.length] }).holder(key);
  assert.deepEqual([h.held, h.token], [false, BigInt(token)], 'not released, or another token');
});

test('stops the command when the lease is lost', async (t) => {
  if (!need(t, URLS.length > 0, 'LOCKMESH_TEST_URLS')) return;
  const key = `nodetest/${randomBytes(5).toString('hex')}/lost`;
  const run = runExample(t, key, 'console.log("running"); setTimeout(() => {}, 120000)');
  assert.equal((await within(run.lines.next(), 'the command running')).value, 'running');
  const ids = (await new Client({ url: URLS[0] }).sessions()).filter((s) => s.name === key).map((s) => s.id);
  assert.equal(ids.length, 1, 'the example\'s session, named after the key');
  await behindItsBack('DELETE', URLS[0], '/v1/sessions/' + ids[0]);
  const { code, stderr } = await within(run.exited, 'the example\'s exit', DEADLINE);
  assert.equal(code, 76, stderr);
  assert.match(stderr, /lost/);
});
