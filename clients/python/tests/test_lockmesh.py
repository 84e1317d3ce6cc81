"""Tests of lockmesh.py against live agents of one mesh.

They need agents to talk to, named by environment variables (clients/
python/README.md, "Tests"); `go test ./clients/` starts three and sets them:

  LOCKMESH_TEST_URLS          the agents' API URLs, comma-separated (3 are best)
  LOCKMESH_API_TOKEN          a token allowed everything, if the agents have tokens
  LOCKMESH_TEST_SOCKET        an agent's API unix socket (else its test skips)
  LOCKMESH_TEST_WORKER_TOKEN  a token allowed to lock under jobs/ only (else
                              its test skips)
  LOCKMESH_TEST_NO_SKIP=1     fail rather than skip when one is missing

No test sleeps waiting for something to happen: each waits on an event,
a queue or a condition, with a deadline.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse
import urllib.request
import uuid
from typing import Any, Callable, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import lockmesh  # noqa: E402

URLS: List[str] = [u for u in os.environ.get("LOCKMESH_TEST_URLS", "").split(",") if u]
NO_SKIP = os.environ.get("LOCKMESH_TEST_NO_SKIP") == "1"

# How long an event may take to come, at most, before a test fails.
DEADLINE = 20.0


def need(value: str, what: str) -> None:
    """Skips the test without value (fails under LOCKMESH_TEST_NO_SKIP)."""
    if value:
        return
    if NO_SKIP:
        raise AssertionError("%s is not set (LOCKMESH_TEST_NO_SKIP=1)" % what)
    raise unittest.SkipTest("%s is not set" % what)


def wait_until(cond: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    """Waits until cond() holds, checking every 20 ms, at most timeout."""
    end = time.monotonic() + timeout
    pause = threading.Event()
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("not within %gs: %s" % (timeout, what))
        pause.wait(0.02)


def in_thread(fn: Callable[[], Any]) -> "queue.Queue[Any]":
    """Runs fn on a thread; its result (or exception) arrives on the queue."""
    q: "queue.Queue[Any]" = queue.Queue()

    def run() -> None:
        try:
            q.put(fn())
        except BaseException as e:  # handed to the test
            q.put(e)

    threading.Thread(target=run, daemon=True).start()
    return q


def result(q: "queue.Queue[Any]", what: str, timeout: float = DEADLINE) -> Any:
    try:
        v = q.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError("no %s within %gs" % (what, timeout)) from None
    if isinstance(v, BaseException):
        raise v
    return v


class MeshTest(unittest.TestCase):
    def setUp(self) -> None:
        need(",".join(URLS), "LOCKMESH_TEST_URLS")
        self.clients = [lockmesh.Client(URLS[i % len(URLS)]) for i in range(3)]
        self.c0, self.c1, self.c2 = self.clients
        self.nodes = [c.ready(wait=30)["node"] for c in self.clients]
        self.prefix = "pytest/%s/" % uuid.uuid4().hex[:10]
        self._closers: List[Callable[[], None]] = []

    def tearDown(self) -> None:
        for close in reversed(self._closers):
            try:
                close()
            except lockmesh.LockmeshError:
                pass

    def session(self, client: lockmesh.Client, **kw: Any) -> lockmesh.Session:
        s = client.session(**kw)
        self._closers.append(s.close)
        return s

    def waiters(self, client: lockmesh.Client) -> int:
        return client.status()["api"]["waiters"]


class TestLocks(MeshTest):
    def test_acquire_hold_release(self) -> None:
        key = self.prefix + "a"
        sent = time.monotonic()
        with self.c0.lock(key, value="host-1") as lease:
            got = time.monotonic()
            self.assertTrue(lease.valid())
            self.assertGreater(lease.token, 0)
            self.assertEqual(lease.kind, "lock")
            self.assertEqual(lease.key, key)
            # valid_until counts from the send time, never from the answer's.
            self.assertGreater(lease.valid_until, sent)
            self.assertLessEqual(lease.valid_until, sent + lease.ttl)
            self.assertLess(lease.valid_until, got + lease.ttl)
            h = self.c1.holder(key)  # through another agent
            self.assertEqual((h.held, h.node, h.token, h.value), (True, self.nodes[0], lease.token, "host-1"))
            self.assertIn(key, [s.key for s in self.c2.locks(self.prefix)])
            lease.set_value("host-2")
            self.assertEqual(self.c2.holder(key).value, "host-2")
        self.assertFalse(lease.valid())
        self.assertFalse(lease.lost.is_set(), "a release is not a loss")
        h = self.c1.holder(key)
        self.assertFalse(h.held)
        self.assertEqual(h.token, lease.token)

    def test_long_key(self) -> None:
        # Over the 256 bytes of a session's name (Client.lock names its
        # session after the key), within the 512 of a key.
        key = self.prefix + "é" * 200
        with self.c0.lock(key) as lease:
            self.assertEqual(self.c1.holder(key).token, lease.token)

    def test_try_once_names_the_holder(self) -> None:
        key = self.prefix + "b"
        lease = self.c0.lock(key)
        self._closers.append(lease.release)
        with self.assertRaises(lockmesh.LockedError) as cm:
            self.c1.lock(key)
        e = cm.exception
        self.assertEqual((e.code, e.status, e.holder, e.token), ("locked", 409, self.nodes[0], lease.token))

    def test_contention_waits_then_gets_a_higher_token(self) -> None:
        key = self.prefix + "c"
        first = self.c0.lock(key)
        before = self.waiters(self.c1)
        q = in_thread(lambda: (self.c1.lock(key, wait=DEADLINE), time.monotonic()))
        wait_until(lambda: self.waiters(self.c1) > before, "the second client waiting on its agent")
        self.assertTrue(q.empty(), "the second client got the lock while the first held it")
        released = time.monotonic()
        first.release()
        second, got = result(q, "grant to the waiting client")
        self._closers.append(second.release)
        self.assertGreater(second.token, first.token)
        self.assertGreaterEqual(got, released)
        self.assertEqual(self.c2.holder(key).token, second.token)

    def test_session_expiry_hands_the_lock_over(self) -> None:
        """A client that stops refreshing loses its lock within its
        session's TTL and a round trip; the next waiter gets it, after the
        first client's valid_until, and holds it although it waited longer
        than its own valid window."""
        key = self.prefix + "d"
        hung = self.session(self.c0, ttl=2, keepalive=False)
        lease = hung.lock(key)
        last = time.monotonic()
        hung.refresh()  # the last sign of life
        # A session of 1 s: its grants are valid for at most 1 s from when
        # they were asked for, and it waits 2 s for this one.
        nxt = self.c1.lock(key, wait=DEADLINE, session_ttl=1)
        got = time.monotonic()
        self._closers.append(nxt.release)
        self.assertGreater(nxt.token, lease.token)
        self.assertLessEqual(lease.valid_until, got, "the hung client's lease was valid after the next grant")
        # TTL 2 s, plus the release's round trip and a loaded machine's slack.
        self.assertLess(got - last, 2.0 + 2.0, "the lock was handed over %.3fs after the last refresh" % (got - last))
        self.assertTrue(nxt.valid(), "a grant that waited its turn came back already past its valid_until")
        wait_until(lambda: nxt.lost.is_set() or nxt.valid_until > got + 0.5, "the keeper renewing the new grant")
        self.assertFalse(nxt.lost.is_set(), nxt.lost_reason)
        with self.assertRaises(lockmesh.SessionExpiredError):
            hung.refresh()
        self.assertTrue(hung.lost.is_set())
        self.assertTrue(lease.lost.is_set())
        self.assertFalse(lease.valid())

    def test_keeper_holds_past_the_ttl(self) -> None:
        key = self.prefix + "e"
        start = time.monotonic()
        lease = self.c0.lock(key, session_ttl=1)
        self._closers.append(lease.release)
        # Three TTLs of waiting elsewhere: the keeper must refresh meanwhile.
        with self.assertRaises(lockmesh.LockedError):
            self.c1.lock(key, wait=3)
        self.assertTrue(lease.valid())
        self.assertFalse(lease.session.lost.is_set())
        self.assertGreater(lease.valid_until, start + 3)

    def test_lease_lost_while_the_session_lives(self) -> None:
        key = self.prefix + "f"
        s = self.session(self.c0, ttl=5)
        lease = s.lock(key)
        # Another program with the session's id releases it behind its back.
        behind_its_back("DELETE", URLS[0], "/v1/locks/%s?session=%s" % (urllib.parse.quote(key, safe=""), s.id))
        self.assertTrue(lease.lost.wait(DEADLINE), "the keeper did not notice the lease gone")
        self.assertIn("no longer lists", lease.lost_reason or "")
        self.assertFalse(lease.valid())
        self.assertFalse(s.lost.is_set())

    def test_session_lost_signal(self) -> None:
        reasons: "queue.Queue[str]" = queue.Queue()
        s = self.session(self.c0, ttl=2, on_lost=reasons.put)
        lease = s.lock(self.prefix + "g")
        # The session ends behind the client's back (another process
        # deleting it, or the agent restarting).
        behind_its_back("DELETE", URLS[0], "/v1/sessions/" + s.id)
        reason = result(reasons, "on_lost callback")
        self.assertIn("session ended", reason)
        self.assertTrue(s.lost.is_set())
        self.assertTrue(lease.lost.is_set())
        self.assertFalse(lease.valid())

    def test_watch_sees_held_then_free_in_order(self) -> None:
        key = self.prefix + "h"
        states: "queue.Queue[Any]" = queue.Queue()
        w = self.c2.watch(key, poll=5)
        self._closers.append(w.close)

        def pump() -> None:
            try:
                for st in w:
                    states.put(st)
            except lockmesh.LockmeshError as e:
                states.put(e)

        before = self.waiters(self.c2)
        threading.Thread(target=pump, daemon=True).start()
        first = result(states, "first state")
        self.assertFalse(first.held)
        # The next state is not there until something changes: the long-poll waits.
        wait_until(lambda: self.waiters(self.c2) > before, "the long-poll waiting on its agent")
        self.assertTrue(states.empty(), "the watch answered with no change")
        self.assertEqual(w.index, first.index)
        lease = self.c0.lock(key, value="v1")
        held = result(states, "held state")
        self.assertEqual((held.held, held.token, held.value, held.node), (True, lease.token, "v1", self.nodes[0]))
        lease.release()
        free = result(states, "free state")
        self.assertEqual((free.held, free.token), (False, lease.token))
        w.close()

        # Resume from the last index: only what came after.
        resumed = self.c1.watch(key, index=free.index, poll=5)
        self._closers.append(resumed.close)
        q = in_thread(lambda: next(resumed))
        again = self.c0.lock(key)
        self._closers.append(again.release)
        st = result(q, "state after resuming")
        self.assertEqual((st.held, st.token), (True, again.token))

    def test_semaphore(self) -> None:
        name = self.prefix + "sem"
        a = self.session(self.c0).semaphore(name, 2)
        b = self.session(self.c1).semaphore(name, 2)
        self.assertNotEqual(a.key, b.key)
        self.assertTrue(a.key.startswith(name + "#") and b.key.startswith(name + "#"))
        with self.assertRaises(lockmesh.LockedError):
            self.session(self.c2).semaphore(name, 2)
        with self.assertRaises(lockmesh.SemaphoreMismatchError):
            self.session(self.c2).semaphore(name, 3)
        a.release()
        c = self.session(self.c2).semaphore(name, 2, wait=DEADLINE)
        self.assertEqual(c.key, a.key)
        self.assertGreater(c.token, a.token)


class TestElections(MeshTest):
    def test_campaign_observe_resign_hands_over(self) -> None:
        name = self.prefix + "leader"
        leaders: "queue.Queue[Any]" = queue.Queue()
        obs = self.c2.observe(name, poll=5)
        self._closers.append(obs.close)

        def pump() -> None:
            try:
                for st in obs:
                    leaders.put(st)
            except lockmesh.LockmeshError as e:
                leaders.put(e)

        threading.Thread(target=pump, daemon=True).start()
        self.assertFalse(result(leaders, "no leader yet").held)

        one = self.session(self.c0).campaign(name, value="one")
        seen = result(leaders, "leader one")
        self.assertEqual((seen.held, seen.value, seen.token, seen.node), (True, "one", one.token, self.nodes[0]))
        self.assertEqual(self.c1.leader(name).value, "one")
        with self.assertRaises(lockmesh.LockedError):
            self.session(self.c1).campaign(name, value="two")

        before = self.waiters(self.c1)
        q = in_thread(lambda: self.session(self.c1).campaign(name, value="two", wait=DEADLINE))
        wait_until(lambda: self.waiters(self.c1) > before, "the second candidate waiting")
        one.resign()
        two = result(q, "leadership of the second candidate")
        self.assertGreater(two.token, one.token)
        st = result(leaders, "leader two")
        while not st.held:  # the gap between the two, if the watch saw it
            st = result(leaders, "leader two")
        self.assertEqual((st.value, st.token, st.node), ("two", two.token, self.nodes[1]))

        two.proclaim("two, again")
        self.assertEqual(result(leaders, "proclaimed value").value, "two, again")
        self.assertEqual(self.c0.leader(name).value, "two, again")


EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "lock_and_run.py")


class TestLockAndRunExample(MeshTest):
    def run_example(self, key: str, code: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, EXAMPLE, "--url", URLS[0], "--session-ttl", "5", key, "--",
                                 sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._closers.append(proc.kill)
        return proc

    def test_runs_the_command_with_the_token(self) -> None:
        key = self.prefix + "run"
        proc = self.run_example(key, "import os; print(os.environ['LOCKMESH_KEY'], os.environ['LOCKMESH_TOKEN'])")
        out, err = proc.communicate(timeout=DEADLINE)
        self.assertEqual(proc.returncode, 0, err)
        got_key, token = out.split()
        self.assertEqual(got_key, key)
        h = self.c1.holder(key)
        self.assertEqual((h.held, h.token), (False, int(token)), "not released, or another token")

    def test_stops_the_command_when_the_lease_is_lost(self) -> None:
        key = self.prefix + "lost"
        proc = self.run_example(key, "import sys, time; print('running', flush=True); time.sleep(120)")
        self.assertEqual(proc.stdout.readline().strip(), "running")  # type: ignore[union-attr]
        ids = [s["id"] for s in self.c0.sessions() if s.get("name") == key]
        self.assertEqual(len(ids), 1, "the example's session, named after the key")
        behind_its_back("DELETE", URLS[0], "/v1/sessions/" + ids[0])
        _, err = proc.communicate(timeout=DEADLINE)
        self.assertEqual(proc.returncode, 76, err)
        self.assertIn("lost", err)


class TestTransportAndErrors(MeshTest):
    def test_unix_socket(self) -> None:
        path = os.environ.get("LOCKMESH_TEST_SOCKET", "")
        need(path, "LOCKMESH_TEST_SOCKET")
        c = lockmesh.Client("unix://" + path, token="")  # no token: the socket's permissions admit us
        self.assertTrue(c.health()["ok"])
        with c.lock(self.prefix + "unix") as lease:
            self.assertEqual(self.c1.holder(self.prefix + "unix").token, lease.token)

    def test_forbidden_and_unauthorized(self) -> None:
        tok = os.environ.get("LOCKMESH_TEST_WORKER_TOKEN", "")
        need(tok, "LOCKMESH_TEST_WORKER_TOKEN")
        worker = lockmesh.Client(URLS[0], token=tok)
        with worker.lock("jobs/" + self.prefix + "ok") as lease:
            self.assertTrue(lease.valid())
        with self.assertRaises(lockmesh.ForbiddenError) as cm:
            worker.lock(self.prefix + "not-for-workers")
        self.assertEqual((cm.exception.code, cm.exception.status), ("forbidden", 403))
        with self.assertRaises(lockmesh.UnauthorizedError):
            lockmesh.Client(URLS[0], token="not-a-token-of-this-agent").health()

    def test_typed_errors(self) -> None:
        with self.assertRaises(lockmesh.InvalidOptionError):
            self.c0.session(ttl=0.01)
        s = self.session(self.c0)
        lease = s.lock(self.prefix + "err")
        lease.release()
        with self.assertRaises(lockmesh.NotHeldError):
            lease.set_value("after release")
        s.close()
        with self.assertRaises(lockmesh.SessionExpiredError):
            s.refresh()
        with self.assertRaises(lockmesh.SessionNotFoundError):
            _unknown_session(self.c0).refresh()
        with self.assertRaises(lockmesh.TransportError):
            lockmesh.Client("http://127.0.0.1:1", timeout=2).health()


def behind_its_back(method: str, url: str, path: str) -> None:
    """A request of another program, with urllib."""
    req = urllib.request.Request(url + path, method=method)
    tok = os.environ.get("LOCKMESH_API_TOKEN")
    if tok:
        req.add_header("Authorization", "Bearer " + tok)
    with urllib.request.urlopen(req, timeout=DEADLINE) as resp:
        resp.read()


def _unknown_session(client: lockmesh.Client) -> lockmesh.Session:
    """A Session object for an id the agent never gave."""
    return lockmesh.Session(client, {"id": "0" * 32, "ttl_ms": 5000, "remaining_ms": 5000}, time.monotonic(),
                            keepalive=False)


if __name__ == "__main__":
    unittest.main()
