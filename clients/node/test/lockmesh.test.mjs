// Tests of lockmesh.mjs against live agents of one mesh.
//
// They need agents to talk to, named by environment variables (README.md,
// "Tests"); `go test ./clients/` starts three and sets them:
//
//   LOCKMESH_TEST_URLS          the agents' API URLs, comma-separated (3 are best)
//   LOCKMESH_API_TOKEN          a token allowed everything, if the agents have tokens
//   LOCKMESH_TEST_SOCKET        an agent's API unix socket (else its test skips)
//   LOCKMESH_TEST_WORKER_TOKEN  a token allowed to lock under jobs/ only
//   LOCKMESH_TEST_NO_SKIP=1     fail rather than skip when one is missing
//
// No test sleeps waiting for something to happen: each awaits the event, or
// a condition, with a deadline.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import * as lockmesh from '../lockmesh.mjs';
import { DEADLINE, URLS, behindItsBack, need, waitUntil, within } from './live.mjs';

const { Client } = lockmesh;

// setup is what each test needs: three clients (one per agent where
// there are three), the agents' names, a fresh key prefix, and a list of
// things to close at the end.
async function setup(t) {
  if (!need(t, URLS.length > 0, 'LOCKMESH_TEST_URLS')) return null;
  const clients = [0, 1, 2].map((i) => new Client({ url: URLS[i % URLS.length] }));
  const nodes = [];
  for (const c of clients) nodes.push((await c.ready({ wait: 30_000 })).node);
  const closers = [];
  t.after(async () => {
    for (const close of closers.reverse()) await Promise.resolve().then(close).catch(() => {});
  });
  const session = async (c, opts) => {
    const s = await c.session(opts);
    closers.push(() => s.close());
    return s;
  };
  const waiters = async (c) => (await c.status()).api.waiters;
  return { clients, nodes, prefix: `nodetest/${randomBytes(5).toString('hex')}/`, closers, session, waiters };
}

// settled tracks whether a promise has settled, for asserting it has not.
function track(p) {
  const t = { done: false, promise: p };
  p.then(() => { t.done = true; }, () => { t.done = true; });
  return t;
}

test('acquire, hold, set a value, release', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const [c0, c1, c2] = s.clients;
  const key = s.prefix + 'a';
  const sent = performance.now();
  const lease = await c0.lock(key, { value: 'host-1' });
  const got = performance.now();
  s.closers.push(() => lease.release());
  assert.ok(lease.valid());
  assert.equal(typeof lease.token, 'bigint');
  assert.ok(lease.token > 0n);
  assert.equal(lease.kind, 'lock');
  assert.equal(lease.key, key);
  // validUntil counts from the send time, never from the answer's.
  assert.ok(lease.validUntil > sent && lease.validUntil <= sent + lease.ttl, `validUntil ${lease.validUntil - sent} ms after sending`);
  assert.ok(lease.validUntil < got + lease.ttl);
  const h = await c1.holder(key); // through another agent
  assert.deepEqual([h.held, h.node, h.token, h.value], [true, s.nodes[0], lease.token, 'host-1']);
  assert.ok((await c2.locks(s.prefix)).some((l) => l.key === key));
  await lease.setValue('host-2');
  assert.equal((await c2.holder(key)).value, 'host-2');
  await lease.release();
  assert.ok(!lease.valid());
  assert.ok(!lease.lost, 'a release is not a loss');
  const after = await c1.holder(key);
  assert.equal(after.held, false);
  assert.equal(after.token, lease.token);
});

test('withLock runs the function holding the lock, then releases it', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const [c0, c1] = s.clients;
  const key = s.prefix + 'with';
  const token = await c0.withLock(key, async (lease) => {
    assert.ok(lease.valid());
    assert.equal((await c1.holder(key)).token, lease.token);
    return lease.token;
  });
  assert.equal((await c1.holder(key)).held, false);
  await assert.rejects(c0.withLock(key, async () => { throw new Error('from fn'); }), /from fn/);
  const h = await c1.holder(key);
  assert.equal(h.held, false, 'released after the function threw');
  assert.ok(h.token > token);
});

test('a long key', async (t) => {
  const s = await setup(t);
  if (!s) return;
  // Over the 256 bytes of a session's name (Client.lock names its session
  // after the key), within the 512 of a key; a surrogate pair at the cut.
  const key = s.prefix + 'é'.repeat(105) + '😀'.repeat(20);
  await s.clients[0].withLock(key, async (lease) => {
    assert.equal((await s.clients[1].holder(key)).token, lease.token);
  });
});

test('try once names the holder', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const [c0, c1] = s.clients;
  const key = s.prefix + 'b';
  const lease = await c0.lock(key);
  s.closers.push(() => lease.release());
  const e = await c1.lock(key).then(() => null, (err) => err);
  assert.ok(e instanceof lockmesh.LockedError, `got ${e}`);
  assert.deepEqual([e.code, e.status, e.holder, e.token], ['locked', 409, s.nodes[0], lease.token]);
});

test('contention: the second client waits, then gets a higher token', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const [c0, c1, c2] = s.clients;
  const key = s.prefix + 'c';
  const first = await c0.lock(key);
  const before = await s.waiters(c1);
  const second = track(c1.lock(key, { wait: DEADLINE }).then((l) => ({ l, got: performance.now() })));
  await waitUntil(async () => (await s.waiters(c1)) > before, 'the second client waiting on its agent');
  assert.ok(!second.done, 'the second client got the lock while the first held it');
  const released = performance.now();
  await first.release();
  const { l, got } = await within(second.promise, 'grant to the waiting client');
  s.closers.push(() => l.release());
  assert.ok(l.token > first.token);
  assert.ok(got >= released);
  assert.equal((await c2.holder(key)).token, l.token);
});

test('session expiry hands the lock over, after the hung client\'s validUntil; a long wait still gives a valid lease', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const [c0, c1] = s.clients;
  const key = s.prefix + 'd';
  const hung = await s.session(c0, { ttl: 2000, keepalive: false });
  const lease = await hung.lock(key);
  const last = performance.now();
  await hung.refresh(); // the last sign of life
  // A session of 1 s: its grants are valid for at most 1 s from when they
  // were asked for, and it waits 2 s for this one.
  const next = await c1.lock(key, { wait: DEADLINE, sessionTTL: 1000 });
  const got = performance.now();
  s.closers.push(() => next.release());
  assert.ok(next.token > lease.token);
  assert.ok(lease.validUntil <= got, 'the hung client\'s lease was valid after the next grant');
  // TTL 2 s, plus the release's round trip and a loaded machine's slack.
  assert.ok(got - last < 2000 + 2000, `handed over ${Math.round(got - last)} ms after the last refresh`);
  assert.ok(next.valid(), 'a grant that waited its turn came back already past its validUntil');
  await waitUntil(() => next.lost || next.validUntil > got + 500, 'the keeper renewing the new grant');
  assert.ok(!next.lost, next.lostReason);
  await assert.rejects(hung.refresh(), lockmesh.SessionExpiredError);
  assert.ok(hung.lost && hung.signal.aborted);
  assert.ok(lease.lost && lease.signal.aborted && !lease.valid());
});

test('the keeper holds a lock past its session\'s TTL', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const [c0, c1] = s.clients;
  const key = s.prefix + 'e';
  const start = performance.now();
  const lease = await c0.lock(key, { sessionTTL: 1000 });
  s.closers.push(() => lease.release());
  // Three TTLs of waiting elsewhere: the keeper must refresh meanwhile.
  await assert.rejects(c1.lock(key, { wait: 3000 }), lockmesh.LockedError);
  assert.ok(lease.valid());
  assert.ok(!lease.session.lost);
  assert.ok(lease.validUntil > start + 3000);
});

test('a lease lost while the session lives aborts its signal', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const key = s.prefix + 'f';
  const sess = await s.session(s.clients[0], { ttl: 5000 });
  const lease = await sess.lock(key);
  const lost = once(lease, 'lost');
  // Another program with the session's id releases it behind its back.
  await behindItsBack('DELETE', URLS[0], `/v1/locks/${encodeURIComponent(key)}?session=${sess.id}`);
  const [reason] = await within(lost, "the 'lost' event");
  assert.match(reason, /no longer lists/);
  assert.ok(lease.signal.aborted);
  assert.ok(lease.signal.reason instanceof lockmesh.LeaseLostError);
  assert.ok(!lease.valid());
  assert.ok(!sess.lost);
});

test('a session ended behind its back emits lost', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const sess = await s.session(s.clients[0], { ttl: 2000 });
  const lease = await sess.lock(s.prefix + 'g');
  const lost = once(sess, 'lost');
  await behindItsBack('DELETE', URLS[0], '/v1/sessions/' + sess.id);
  const [reason] = await within(lost, "the session's 'lost' event");
  assert.match(reason, /session ended/);
  assert.ok(sess.signal.aborted && sess.signal.reason instanceof lockmesh.SessionExpiredError);
  assert.ok(lease.lost && !lease.valid());
});

test('watch sees held, then free, in order, and resumes by index', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const [c0, c1, c2] = s.clients;
  const key = s.prefix + 'h';
  const w = c2.watch(key, { poll: 5000 });
  s.closers.push(() => w.close());
  const next = async (what) => (await within(w.next(), what)).value;
  const first = await next('first state');
  assert.equal(first.held, false);
  assert.equal(w.index, first.index);
  // The next state is not there until something changes: the long-poll waits.
  const before = await s.waiters(c2);
  const pending = track(w.next());
  await waitUntil(async () => (await s.waiters(c2)) > before, 'the long-poll waiting on its agent');
  assert.ok(!pending.done, 'the watch answered with no change');
  const lease = await c0.lock(key, { value: 'v1' });
  const held = (await within(pending.promise, 'held state')).value;
  assert.deepEqual([held.held, held.token, held.value, held.node], [true, lease.token, 'v1', s.nodes[0]]);
  await lease.release();
  const free = await next('free state');
  assert.deepEqual([free.held, free.token], [false, lease.token]);
  w.close();
  assert.deepEqual(await within(w.next(), 'end of a closed watch'), { value: undefined, done: true });

  // Resume from the last index: only what came after.
  const ac = new AbortController();
  s.closers.push(() => ac.abort());
  const resumed = track(c1.watch(key, { index: free.index, poll: 5000, signal: ac.signal }).next());
  const again = await c0.lock(key);
  s.closers.push(() => again.release());
  const st = (await within(resumed.promise, 'state after resuming')).value;
  assert.deepEqual([st.held, st.token], [true, again.token]);

  // for await ... break ends a watch.
  for await (const state of c1.watch(key, { poll: 5000 })) {
    assert.equal(state.token, again.token);
    break;
  }
});

test('semaphore: n slots, then LockedError, then a freed slot', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const [c0, c1, c2] = s.clients;
  const name = s.prefix + 'sem';
  const a = await (await s.session(c0)).semaphore(name, 2);
  const b = await (await s.session(c1)).semaphore(name, 2);
  assert.notEqual(a.key, b.key);
  assert.ok(a.key.startsWith(name + '#') && b.key.startsWith(name + '#'));
  await assert.rejects((await s.session(c2)).semaphore(name, 2), lockmesh.LockedError);
  await assert.rejects((await s.session(c2)).semaphore(name, 3), lockmesh.SemaphoreMismatchError);
  await a.release();
  const c = await (await s.session(c2)).semaphore(name, 2, { wait: DEADLINE });
  assert.equal(c.key, a.key);
  assert.ok(c.token > a.token);
});

test('election: campaign, observe, resign hands over, proclaim', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const [c0, c1, c2] = s.clients;
  const name = s.prefix + 'leader';
  const obs = c2.observe(name, { poll: 5000 });
  s.closers.push(() => obs.close());
  const next = async (what) => (await within(obs.next(), what)).value;
  assert.equal((await next('no leader yet')).held, false);

  const one = await (await s.session(c0)).campaign(name, { value: 'one' });
  assert.ok(one instanceof lockmesh.Leadership);
  const seen = await next('leader one');
  assert.deepEqual([seen.held, seen.value, seen.token, seen.node], [true, 'one', one.token, s.nodes[0]]);
  assert.equal((await c1.leader(name)).value, 'one');
  await assert.rejects((await s.session(c1)).campaign(name, { value: 'two' }), lockmesh.LockedError);

  const before = await s.waiters(c1);
  const candidate = await s.session(c1);
  const second = track(candidate.campaign(name, { value: 'two', wait: DEADLINE }));
  await waitUntil(async () => (await s.waiters(c1)) > before, 'the second candidate waiting');
  await one.resign();
  const two = await within(second.promise, 'leadership of the second candidate');
  assert.ok(two.token > one.token);
  let st = await next('leader two');
  while (!st.held) st = await next('leader two'); // the gap between the two, if the watch saw it
  assert.deepEqual([st.value, st.token, st.node], ['two', two.token, s.nodes[1]]);

  await two.proclaim('two, again');
  assert.equal((await next('proclaimed value')).value, 'two, again');
  assert.equal((await c0.leader(name)).value, 'two, again');
});

test('the unix socket', async (t) => {
  const s = await setup(t);
  if (!s || !need(t, process.env.LOCKMESH_TEST_SOCKET, 'LOCKMESH_TEST_SOCKET')) return;
  const c = new Client({ url: 'unix://' + process.env.LOCKMESH_TEST_SOCKET, token: '' }); // the socket's permissions admit us
  assert.equal((await c.health()).ok, true);
  await c.withLock(s.prefix + 'unix', async (lease) => {
    assert.equal((await s.clients[1].holder(s.prefix + 'unix')).token, lease.token);
  });
});

test('tokens: forbidden and unauthorized', async (t) => {
  const s = await setup(t);
  const tok = process.env.LOCKMESH_TEST_WORKER_TOKEN;
  if (!s || !need(t, tok, 'LOCKMESH_TEST_WORKER_TOKEN')) return;
  const worker = new Client({ url: URLS[0], token: tok });
  await worker.withLock('jobs/' + s.prefix + 'ok', (lease) => assert.ok(lease.valid()));
  const e = await worker.lock(s.prefix + 'not-for-workers').then(() => null, (err) => err);
  assert.ok(e instanceof lockmesh.ForbiddenError, `got ${e}`);
  assert.deepEqual([e.code, e.status], ['forbidden', 403]);
  await assert.rejects(new Client({ url: URLS[0], token: 'not-a-token-of-this-agent' }).health(), lockmesh.UnauthorizedError);
});

test('typed errors', async (t) => {
  const s = await setup(t);
  if (!s) return;
  const c0 = s.clients[0];
  await assert.rejects(c0.session({ ttl: 10 }), lockmesh.InvalidOptionError);
  const sess = await s.session(c0);
  const lease = await sess.lock(s.prefix + 'err');
  await lease.release();
  await assert.rejects(lease.setValue('after release'), lockmesh.NotHeldError);
  await sess.close();
  await assert.rejects(sess.refresh(), lockmesh.SessionExpiredError);
  const unknown = new lockmesh.Session(c0, { id: '0'.repeat(32), ttl_ms: 5000, remaining_ms: 5000 }, performance.now(), { keepalive: false });
  await assert.rejects(unknown.refresh(), lockmesh.SessionNotFoundError);
  const e = await new Client({ url: 'http://127.0.0.1:1', timeout: 2000 }).health().then(() => null, (err) => err);
  assert.ok(e instanceof lockmesh.TransportError, `got ${e}`);
  assert.equal(e.code, 'transport');
});

test('tokens past 2^53 keep every digit', async (t) => {
  // A JSON number would round 18446744073709551615 to 18446744073709552000.
  // Agents give tokens near the wall clock in microseconds, under 2^53 until
  // about 2255: a stand-in answers instead.
  const body = '{"key":"k","held":true,"node":"a","token":18446744073709551615,' +
    '"value":"{\\"token\\":1,\\"x\\":2}","index":"i"}';
  const server = http.createServer((req, res) => {
    res.setHeader('Content-Type', 'application/json');
    res.end(body);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => server.close());
  const h = await new Client({ url: `http://127.0.0.1:${server.address().port}` }).holder('k');
  assert.equal(h.token, 18446744073709551615n);
  assert.equal(h.value, '{"token":1,"x":2}', 'a token inside a string is left alone');
});
