#!/usr/bin/env python3
"""Runs a command while holding a lockmesh lock.

    lock_and_run.py [--url URL] [--wait SECONDS] [--session-ttl SECONDS]
                    [--grace SECONDS] KEY -- CMD [ARG...]

Takes the lock KEY through the agent at URL (default: $LOCKMESH_URL, else
the agent's default unix socket), waiting at most --wait for it, then runs
CMD with LOCKMESH_KEY and LOCKMESH_TOKEN (the fencing token: pass it to
every write) added to its environment, and releases the lock when CMD
exits. If the lease is lost while CMD runs, or can no longer be proved
valid (its valid_until comes within a tenth of its TTL without a refresh),
CMD's process group gets SIGTERM, then SIGKILL after --grace or before
valid_until, whichever comes first.

Exit status: CMD's (128+N if signal N killed it); 69 the agent could not
be reached or no majority answered; 75 the lock was not acquired within
--wait; 76 the lease was lost while CMD ran.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import lockmesh  # noqa: E402

EXIT_UNAVAILABLE, EXIT_TIMEOUT, EXIT_LOST = 69, 75, 76


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="Run a command while holding a lockmesh lock.")
    p.add_argument("--url", help="the agent's API (http://, https:// or unix://)")
    p.add_argument("--wait", type=float, default=0, help="seconds to wait for the lock (0: try once)")
    p.add_argument("--session-ttl", type=float, default=10, help="the session's TTL, seconds")
    p.add_argument("--grace", type=float, default=2, help="seconds between SIGTERM and SIGKILL on a loss")
    p.add_argument("key")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    a = p.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        p.error("want KEY -- CMD [ARG...]")

    client = lockmesh.Client(a.url)
    try:
        lease = client.lock(a.key, wait=a.wait, session_ttl=a.session_ttl)
    except lockmesh.LockedError as e:
        print("lock_and_run: %s is held by %s" % (a.key, e.holder), file=sys.stderr)
        return EXIT_TIMEOUT
    except (lockmesh.TransportError, lockmesh.NoQuorumError, lockmesh.NotReadyError) as e:
        print("lock_and_run: %s" % e, file=sys.stderr)
        return EXIT_UNAVAILABLE
    try:
        return run(cmd, lease, a.grace)
    finally:
        try:
            lease.release()
        except lockmesh.LockmeshError as e:  # the session's TTL ends it anyway
            print("lock_and_run: releasing: %s" % e, file=sys.stderr)


def run(cmd: list[str], lease: lockmesh.Lease, grace: float) -> int:
    env = dict(os.environ, LOCKMESH_KEY=lease.key, LOCKMESH_TOKEN=str(lease.token))
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    exited = threading.Event()
    threading.Thread(target=lambda: (proc.wait(), exited.set()), daemon=True).start()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda n, _f: os.killpg(proc.pid, n))
    margin = max(lease.ttl / 10, 0.05)
    while not exited.is_set():
        left = lease.remaining()
        if lease.lost.is_set() or left <= margin:
            why = lease.lost_reason or "not refreshed in time"
            print("lock_and_run: lease on %s lost (%s): stopping the command" % (lease.key, why), file=sys.stderr)
            stop(proc, exited, lease, grace, margin)
            return EXIT_LOST
        exited.wait(min(left - margin, 0.1))
    rc = proc.returncode
    return 128 - rc if rc < 0 else rc


def stop(proc: subprocess.Popen, exited: threading.Event, lease: lockmesh.Lease, grace: float, margin: float) -> None:
    """SIGTERM to the command's group; SIGKILL after grace, or a quarter
    of the margin before valid_until if that comes first."""
    signal_group(proc, signal.SIGTERM)
    kill_at = min(time.monotonic() + grace, lease.valid_until - margin / 4)
    if not exited.wait(max(kill_at - time.monotonic(), 0)):
        signal_group(proc, signal.SIGKILL)
    exited.wait()


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
