"""A client of the lockmesh agent's HTTP API (docs/http-api.md).

One module, the standard library only, Python 3.9 or later::

    import lockmesh

    client = lockmesh.Client("http://127.0.0.1:8500")
    with client.lock("backups/nightly", wait=30) as lease:
        run_backup(fencing_token=lease.token)   # until lease.valid_until

Every lock, semaphore slot and leadership is held for a *session*, which
the agent keeps only while the client refreshes it. A ``Session`` refreshes
itself on a background thread; when it can no longer prove that it holds
something, it sets the ``lost`` event of the session or of the lease and
calls the ``on_lost`` callbacks. ``Client.lock`` makes a session for one
lock and ends it on release.

The timing guarantee: act under a lease only while ``lease.valid()``, that
is until ``lease.valid_until``, a time on ``time.monotonic()``'s clock
computed from the moment the request was sent plus the ``valid_ms`` the
agent answered; and pass ``lease.token`` (the fencing token) with every
write to the shared resource, which should refuse tokens lower than one it
has seen.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, List, Optional, Tuple, TypeVar, Union

__all__ = [
    "Client", "Session", "Lease", "Leadership", "KeyState", "Leader", "Watch",
    "LockmeshError", "TransportError", "BadRequestError", "InvalidKeyError",
    "InvalidOptionError", "ValueTooLargeError", "UnauthorizedError",
    "ForbiddenError", "NotFoundError", "SessionExpiredError",
    "SessionNotFoundError", "UnknownNodeError", "LockedError", "NotHeldError",
    "SemaphoreMismatchError", "BadVoterChangeError", "LeaseLostError",
    "TooManyError", "NoQuorumError", "NotReadyError", "UpgradeRequiredError",
    "AgentClosedError", "OperationTimeoutError", "default_url",
]

__version__ = "0.1.0"

log = logging.getLogger("lockmesh")

Duration = Union[float, int, str]
"""Seconds (a number) or a Go duration string such as ``"1m30s"``."""

DEFAULT_TIMEOUT = 10.0
"""How long a call that does not wait may take, in seconds."""

T = TypeVar("T")


# ---------------------------------------------------------------- errors


class LockmeshError(Exception):
    """An error of the agent (an RFC 9457 problem) or of the way to it.

    ``code`` is the problem's stable code (docs/http-api.md, "Errors");
    ``status`` its HTTP status; ``problem`` the whole answer.
    """

    def __init__(self, message: str, code: str = "", status: int = 0,
                 problem: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.problem: Dict[str, Any] = problem or {}
        self.title: str = self.problem.get("title", "")
        self.detail: str = self.problem.get("detail", message)
        ms = self.problem.get("retry_after_ms")
        self.retry_after: Optional[float] = ms / 1000.0 if ms else None


class TransportError(LockmeshError):
    """The agent could not be reached, or did not answer in time
    (``code`` is ``"transport"``; ``__cause__`` says why)."""


class BadRequestError(LockmeshError):
    """400: the request is malformed (bad_request)."""


class InvalidKeyError(BadRequestError):
    """400 invalid_key: empty, too long, not UTF-8."""


class InvalidOptionError(BadRequestError):
    """400 invalid_option: a TTL or ``n`` out of range."""


class ValueTooLargeError(BadRequestError):
    """400 value_too_large: a value over the mesh's MaxValueSize."""


class UnauthorizedError(LockmeshError):
    """401: no token, or not one of the agent's."""


class ForbiddenError(LockmeshError):
    """403: the token lacks the permission (the detail says which rule)."""


class NotFoundError(LockmeshError):
    """404 not_found: no such route."""


class SessionExpiredError(LockmeshError):
    """410 session_expired: the session ended (expired, deleted)."""


class SessionNotFoundError(SessionExpiredError, NotFoundError):
    """404 session_not_found: the agent does not know the session (it
    ended long ago, or the agent restarted): as gone as an expired one."""


class UnknownNodeError(NotFoundError):
    """404 unknown_node: a voter change naming a node gossip does not know."""


class LockedError(LockmeshError):
    """409 locked: held by another; ``holder`` (a node) and ``token``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holder: str = self.problem.get("holder", "")
        self.token: int = self.problem.get("token", 0)
        self.key: str = self.problem.get("key", "")


class NotHeldError(LockmeshError):
    """409 not_held: the session does not hold it (released, lost)."""


class SemaphoreMismatchError(LockmeshError):
    """409 semaphore_mismatch: another ``n`` for that semaphore."""


class BadVoterChangeError(LockmeshError):
    """409 bad_voter_change: a voter change the mesh refuses."""


class LeaseLostError(LockmeshError):
    """410 lease_lost: the lease was lost."""


class TooManyError(LockmeshError):
    """429 too_many: an agent limit reached; see ``retry_after``."""


class NoQuorumError(LockmeshError):
    """503 no_quorum: no majority of the voters answered; nothing granted."""


class NotReadyError(LockmeshError):
    """503 not_ready: the node has no voter configuration yet."""


class UpgradeRequiredError(LockmeshError):
    """503 upgrade_required: a node speaks an earlier protocol."""


class AgentClosedError(LockmeshError):
    """503 closed: the agent is shutting down."""


class OperationTimeoutError(LockmeshError):
    """504 timeout: a read or change did not finish in time on the agent."""


_ERRORS: Dict[str, type] = {
    "bad_request": BadRequestError,
    "invalid_key": InvalidKeyError,
    "invalid_option": InvalidOptionError,
    "value_too_large": ValueTooLargeError,
    "body_too_large": BadRequestError,
    "unsupported_media_type": BadRequestError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "not_found": NotFoundError,
    "session_not_found": SessionNotFoundError,
    "unknown_node": UnknownNodeError,
    "locked": LockedError,
    "not_held": NotHeldError,
    "semaphore_mismatch": SemaphoreMismatchError,
    "bad_voter_change": BadVoterChangeError,
    "session_expired": SessionExpiredError,
    "lease_lost": LeaseLostError,
    "too_many": TooManyError,
    "no_quorum": NoQuorumError,
    "not_ready": NotReadyError,
    "upgrade_required": UpgradeRequiredError,
    "closed": AgentClosedError,
    "timeout": OperationTimeoutError,
}


def _problem_error(status: int, body: bytes) -> LockmeshError:
    try:
        p = json.loads(body)
        if not isinstance(p, dict):
            raise ValueError
    except ValueError:
        p = {"detail": body.decode("utf-8", "replace").strip()}
    code = str(p.get("code", ""))
    cls = _ERRORS.get(code, LockmeshError)
    msg = "%s (%d): %s" % (code or "http", status, p.get("detail") or p.get("title") or "")
    return cls(msg, code=code, status=status, problem=p)


# ---------------------------------------------------------------- values


@dataclass(frozen=True)
class KeyState:
    """A key's state: who holds it (``node``), its ``token`` (the holder's,
    or the last grant's when free), its ``value``, and the ``index`` to pass
    back to wait for the next state."""

    key: str
    held: bool
    token: int
    value: str
    index: str
    node: str = ""
    time_left: Optional[float] = None

    @classmethod
    def _of(cls, d: Dict[str, Any]) -> "KeyState":
        tl = d.get("time_left_ms")
        return cls(key=d["key"], held=d["held"], token=d.get("token", 0), value=d.get("value", ""),
                   index=d.get("index", ""), node=d.get("node", ""),
                   time_left=tl / 1000.0 if tl is not None else None)


@dataclass(frozen=True)
class Leader:
    """An election's state: ``held`` False when nobody leads."""

    name: str
    held: bool
    token: int
    value: str
    index: str
    node: str = ""

    @classmethod
    def _of(cls, d: Dict[str, Any]) -> "Leader":
        return cls(name=d["name"], held=d["held"], token=d.get("token", 0), value=d.get("value", ""),
                   index=d.get("index", ""), node=d.get("node", ""))


def _duration(d: Duration) -> str:
    """A Go duration string for d (seconds, or a string as it is)."""
    if isinstance(d, str):
        return d
    if d < 0:
        raise ValueError("negative duration %r" % (d,))
    return "%dms" % int(round(d * 1000))


def _seconds(d: Duration) -> float:
    """d in seconds (a Go duration string of h, m, s, ms parts, or a number)."""
    if not isinstance(d, str):
        return float(d)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    total, num, i = 0.0, "", 0
    while i < len(d):
        c = d[i]
        if c.isdigit() or c == ".":
            num += c
            i += 1
            continue
        unit = d[i:i + 2] if d[i:i + 2] in units else c
        if unit not in units or not num:
            raise ValueError("not a duration: %r" % (d,))
        total += float(num) * units[unit]
        num, i = "", i + len(unit)
    if num:
        if total == 0 and float(num) == 0:
            return 0.0
        raise ValueError("not a duration: %r" % (d,))
    return total


def _quote(key: str) -> str:
    return urllib.parse.quote(key, safe="")


def _session_name(key: str) -> str:
    """key, cut to the 256 bytes a session's name may have."""
    return key.encode("utf-8")[:256].decode("utf-8", "ignore")


def default_url() -> str:
    """Where ``Client()`` connects without a URL: ``$LOCKMESH_URL``, else the
    agent's default unix socket (``$XDG_RUNTIME_DIR/lockmesh-http.sock``, or
    ``/tmp/lockmesh-UID-http.sock``)."""
    if os.environ.get("LOCKMESH_URL"):
        return os.environ["LOCKMESH_URL"]
    d = os.environ.get("XDG_RUNTIME_DIR")
    if d:
        return "unix://" + os.path.join(d, "lockmesh-http.sock")
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return "unix://" + os.path.join(tmp, "lockmesh-%d-http.sock" % os.getuid())


# ---------------------------------------------------------------- transport


class _UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a unix socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class _NotSent(Exception):
    """The connection failed before the request left: safe to try again."""


# Retries of a call, and the pause before each.
_RETRY_PAUSES = (0.05, 0.2, 0.5)


class Client:
    """A client of one agent's HTTP API.

    ``url`` is ``http://host:port``, ``https://host:port`` or
    ``unix:///path/to/lockmesh-http.sock`` (default: ``default_url()``).
    ``token`` is a bearer token of the agent's configuration (default:
    ``$LOCKMESH_API_TOKEN``; none is needed on the unix socket or on an
    agent without tokens). ``timeout`` bounds, in seconds, every call that
    does not wait; one that waits gets its wait on top. ``ssl_context``
    verifies an https agent (for example
    ``ssl.create_default_context(cafile="ca.pem")``).

    A Client holds no connection (each call opens its own) and may be
    shared between threads.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT, ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.url = url or default_url()
        self.token = token if token is not None else os.environ.get("LOCKMESH_API_TOKEN") or None
        self.timeout = float(timeout)
        self._ssl = ssl_context
        u = urllib.parse.urlsplit(self.url)
        if u.scheme == "unix" or (not u.scheme and self.url.startswith("/")):
            self._socket_path: Optional[str] = u.path if u.scheme else self.url
            self._host, self._port, self._https, self._prefix = "localhost", None, False, ""
        elif u.scheme in ("http", "https"):
            self._socket_path = None
            self._host, self._port, self._https = u.hostname or "localhost", u.port, u.scheme == "https"
            self._prefix = u.path.rstrip("/")
        else:
            raise ValueError("url %r: want http://, https:// or unix://" % (self.url,))

    def __repr__(self) -> str:
        return "lockmesh.Client(%r)" % (self.url,)

    # -- the one way requests go out

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._socket_path is not None:
            return _UnixHTTPConnection(self._socket_path, timeout)
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
                 query: Optional[Dict[str, str]] = None, wait: float = 0.0,
                 timeout: Optional[float] = None, repeatable: bool = False,
                 on_connection: Optional[Callable[[http.client.HTTPConnection], None]] = None,
                 ) -> Tuple[int, Any, Dict[str, str]]:
        """Sends a request and returns (status, decoded JSON or None,
        headers); a problem answer raises its LockmeshError.

        A call is tried again (at most len(_RETRY_PAUSES) times, within its
        time) when the connection failed before the request left, and, if
        repeatable (the API says repeating it is harmless), when it failed
        before an answer came. Answers are never retried.
        """
        budget = (self.timeout if timeout is None else timeout) + wait
        deadline = time.monotonic() + budget
        target = self._prefix + path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        attempt = 0
        while True:
            left = deadline - time.monotonic()
            try:
                return self._once(method, target, payload, headers, max(left, 0.001), on_connection)
            except (_NotSent, OSError, http.client.HTTPException) as e:
                cause = e.__cause__ if isinstance(e, _NotSent) else e
                again = isinstance(e, _NotSent) or repeatable
                if not again or attempt >= len(_RETRY_PAUSES) or left <= _RETRY_PAUSES[attempt]:
                    raise TransportError("%s %s: %s" % (method, path, cause), code="transport") from cause
                time.sleep(_RETRY_PAUSES[attempt])
                attempt += 1

    def _once(self, method: str, target: str, payload: Optional[bytes], headers: Dict[str, str],
              timeout: float, on_connection: Optional[Callable[[http.client.HTTPConnection], None]],
              ) -> Tuple[int, Any, Dict[str, str]]:
        conn = self._connection(timeout)
        try:
            try:
                conn.connect()
            except OSError as e:
                raise _NotSent() from e
            if on_connection is not None:
                on_connection(conn)
            conn.request(method, target, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()
        if resp.status >= 400:
            raise _problem_error(resp.status, data)
        if not data:
            return resp.status, None, hdrs
        return resp.status, json.loads(data), hdrs

    # -- meta

    def health(self) -> Dict[str, Any]:
        """``{"ok": True, "node": ...}`` while the agent runs."""
        return self._request("GET", "/v1/health", repeatable=True)[1]

    def ready(self, wait: Duration = 0) -> Dict[str, Any]:
        """``{"ready": True, "node": ...}`` once the node is ready, waiting
        up to ``wait`` for it; NotReadyError otherwise."""
        w = _seconds(wait)
        q = {"wait": _duration(wait)} if w > 0 else None
        return self._request("GET", "/v1/ready", query=q, wait=w, repeatable=True)[1]

    def status(self) -> Dict[str, Any]:
        """The node's status and the API's counts (``/v1/status``)."""
        return self._request("GET", "/v1/status", repeatable=True)[1]

    def voters(self) -> Dict[str, Any]:
        """The voter configuration."""
        return self._request("GET", "/v1/voters", repeatable=True)[1]

    def sessions(self) -> List[Dict[str, Any]]:
        """Every session of the agent (an admin token's call)."""
        return self._request("GET", "/v1/sessions", repeatable=True)[1]["sessions"]

    # -- sessions

    def session(self, ttl: Optional[Duration] = None, name: str = "", keepalive: bool = True,
                on_lost: Optional[Callable[[str], None]] = None) -> "Session":
        """Creates a session of ``ttl`` (default: the agent's, 10 s).

        With ``keepalive`` (the default) a background thread refreshes it
        until it is closed; without, call ``refresh()`` yourself within the
        TTL. ``on_lost`` is called (on that thread) with the reason once the
        session is lost. Creating a session is not repeated on a failure:
        a session created whose answer was lost ends by its TTL.
        """
        body: Dict[str, Any] = {}
        if ttl is not None:
            body["ttl"] = _duration(ttl)
        if name:
            body["name"] = name
        sent = time.monotonic()
        _, data, _ = self._request("POST", "/v1/sessions", body=body)
        return Session(self, data, sent, keepalive=keepalive, on_lost=on_lost)

    # -- locks

    def lock(self, key: str, wait: Optional[Duration] = None, ttl: Optional[Duration] = None,
             value: str = "", session_ttl: Optional[Duration] = None, name: str = "") -> "Lease":
        """Takes ``key`` under a new session of its own, which the lease
        ends when released (also as a context manager)::

            with client.lock("jobs/42", wait=30) as lease:
                ...  # while lease.valid(); pass lease.token on

        Without ``wait`` it tries once (LockedError names the holder); with
        it, it waits in turn at most that long (the agent caps it at its
        ``limits.max_wait``, 5 minutes by default).
        """
        s = self.session(ttl=session_ttl, name=name or _session_name(key))
        try:
            lease = s.lock(key, wait=wait, ttl=ttl, value=value)
        except BaseException:
            s._close_quietly()
            raise
        lease._owns_session = True
        return lease

    def holder(self, key: str) -> KeyState:
        """Who holds ``key`` now (a linearizable read)."""
        return KeyState._of(self._request("GET", "/v1/locks/" + _quote(key), repeatable=True)[1])

    def locks(self, prefix: str = "") -> List[KeyState]:
        """The held locks under ``prefix`` that the caller may read."""
        data = self._request("GET", "/v1/locks", query={"prefix": prefix}, repeatable=True)[1]
        return [KeyState._of(d) for d in data["locks"]]

    def watch(self, key: str, index: Optional[str] = None, poll: Duration = 60.0) -> "Watch[KeyState]":
        """An iterator over ``key``'s states: the current one first (unless
        ``index`` is the index of a state already seen: then the next one),
        then each new one, by long-polls of ``poll`` each. Resume a watch
        that failed with ``watch(key, index=w.index)``; ``close()`` it from
        any thread."""
        return Watch(self, "/v1/watch/" + _quote(key), KeyState._of, index, _seconds(poll))

    # -- elections

    def leader(self, name: str) -> Leader:
        """Who leads election ``name`` now."""
        return Leader._of(self._request("GET", "/v1/elections/" + _quote(name), repeatable=True)[1])

    def observe(self, name: str, index: Optional[str] = None, poll: Duration = 60.0) -> "Watch[Leader]":
        """An iterator over election ``name``'s leaders, as ``watch``."""
        return Watch(self, "/v1/observe/" + _quote(name), Leader._of, index, _seconds(poll))


class Session:
    """A session of the agent: it owns the leases taken under it, and lives
    while it is refreshed within its TTL.

    ``lost`` is set once the session is gone for a reason not its own
    (expired, deleted elsewhere, the agent restarted or unreachable for
    longer than its TTL); ``lost_reason`` says why, and the ``on_lost``
    callbacks are called with it. Its leases are lost with it.
    ``close()`` (or leaving a ``with`` block) ends it and releases
    everything it holds.
    """

    def __init__(self, client: Client, data: Dict[str, Any], sent: float, keepalive: bool = True,
                 on_lost: Optional[Callable[[str], None]] = None) -> None:
        self.client = client
        self.id: str = data["id"]
        self.name: str = data.get("name", "")
        self.ttl: float = data["ttl_ms"] / 1000.0
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self.closed = False
        self.expires: float = sent + data["remaining_ms"] / 1000.0
        """When the session ends unless refreshed, on time.monotonic()."""
        self._callbacks: List[Callable[[str], None]] = [on_lost] if on_lost else []
        self._mu = threading.Lock()
        self._leases: Dict[Tuple[str, str], Lease] = {}
        self._wake = threading.Event()
        self._keeper: Optional[threading.Thread] = None
        if keepalive:
            self._keeper = threading.Thread(target=self._keep, name="lockmesh-session-" + self.id[:8], daemon=True)
            self._keeper.start()

    def __repr__(self) -> str:
        return "lockmesh.Session(%s, ttl=%gs)" % (self.id, self.ttl)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def on_lost(self, fn: Callable[[str], None]) -> None:
        """Calls ``fn(reason)`` once the session is lost (at once if it is)."""
        with self._mu:
            if not self.lost.is_set():
                self._callbacks.append(fn)
                return
        fn(self.lost_reason or "")

    # -- taking

    def lock(self, key: str, wait: Optional[Duration] = None, ttl: Optional[Duration] = None,
             value: str = "") -> "Lease":
        """Takes lock ``key`` for this session: once (``wait`` None or 0:
        LockedError if held), or waiting at most ``wait``. ``ttl`` is the
        mesh lease's TTL (default: the agent's). Asking again for a lock
        the session holds returns its lease."""
        return self._take("lock", "/v1/locks/" + _quote(key), key, wait, ttl, value)

    def semaphore(self, name: str, n: int, wait: Optional[Duration] = None, value: str = "") -> "Lease":
        """Takes one of the ``n`` slots of semaphore ``name`` (every user
        gives the same ``n``). The lease's ``key`` is the slot's, its token
        the slot's. Without ``wait`` the agent makes one pass over the
        slots (at most 1 s)."""
        return self._take("semaphore", "/v1/semaphores/" + _quote(name), name, wait, None, value, n=n)

    def campaign(self, name: str, value: str = "", wait: Optional[Duration] = None) -> "Leadership":
        """Leads election ``name`` with ``value``: tries once, or waits at
        most ``wait`` for the leader to go."""
        lease = self._take("election", "/v1/elections/" + _quote(name), name, wait, None, value)
        assert isinstance(lease, Leadership)
        return lease

    def _take(self, kind: str, path: str, name: str, wait: Optional[Duration], ttl: Optional[Duration],
              value: str, n: int = 0) -> "Lease":
        body: Dict[str, Any] = {"session": self.id}
        w = _seconds(wait) if wait is not None else 0.0
        if w > 0:
            body["wait"] = _duration(wait)  # type: ignore[arg-type]
        if ttl is not None:
            body["ttl"] = _duration(ttl)
        if value:
            body["value"] = value
        if n:
            body["n"] = n
        sent = time.monotonic()
        # Repeatable: the agent answers a repeated acquire with the grant
        # the session holds.
        _, data, _ = self.client._request("PUT", path, body=body, wait=w, repeatable=True)
        if time.monotonic() - sent > data["valid_ms"] / 3000.0:
            # It waited its turn: valid_until counted from when it was sent
            # would be near, or past. A refresh now gives a bound counted
            # from now (nobody has acted under the lease yet).
            sent, data = self._reanchor(kind, name)
        with self._mu:
            lease = self._leases.get((kind, name))
            if lease is None:
                cls = Leadership if kind == "election" else Lease
                lease = cls(self, data, sent)
                self._leases[(kind, name)] = lease
            else:
                lease._update(data, sent)
        self._wake.set()  # the keeper's next refresh may come sooner now
        return lease

    def _reanchor(self, kind: str, name: str) -> Tuple[float, Dict[str, Any]]:
        """Refreshes the session for a grant just received: its send time
        and its entry in the answer (LeaseLostError if it is not there)."""
        sent = time.monotonic()
        try:
            _, data, _ = self.client._request("POST", "/v1/sessions/%s/refresh" % self.id, repeatable=True)
        except SessionExpiredError as e:
            self._lose("session ended: %s" % e.detail)
            raise
        self._apply(data, sent)
        for g in data.get("leases", []):
            if (g["kind"], g["name"]) == (kind, name):
                return sent, g
        raise LeaseLostError("%s %r was lost as soon as it was granted" % (kind, name), code="lease_lost")

    # -- refreshing

    def refresh(self) -> None:
        """Restarts the session's TTL now and renews every lease's
        ``valid_until``. SessionExpiredError once the session is gone (it
        is then lost)."""
        self._refresh(self.client.timeout)

    def _refresh(self, timeout: float) -> None:
        sent = time.monotonic()
        try:
            _, data, _ = self.client._request("POST", "/v1/sessions/%s/refresh" % self.id,
                                              timeout=timeout, repeatable=True)
        except SessionExpiredError as e:
            if not self.closed:
                self._lose("session ended: %s" % e.detail)
            raise
        self._apply(data, sent)

    def _apply(self, data: Dict[str, Any], sent: float) -> None:
        """Takes in a refresh's answer, sent at ``sent``."""
        now = time.monotonic()
        self._expire(now)
        listed = {(g["kind"], g["name"]): g for g in data.get("leases", [])}
        with self._mu:
            self.expires = sent + data["remaining_ms"] / 1000.0
            leases = list(self._leases.items())
        for k, lease in leases:
            g = listed.get(k)
            if g is not None:
                lease._update(g, sent)
            elif lease._got < sent:
                # Granted before the refresh left, and not listed: lost.
                self._drop(lease, "the agent no longer lists it (lost while the session lived)")

    def _expire(self, now: float) -> None:
        """Loses what has not been proved valid up to now."""
        if now >= self.expires and not self.closed:
            self._lose("not refreshed within its ttl of %gs" % self.ttl)
            return
        with self._mu:
            late = [lease for lease in self._leases.values() if now >= lease.valid_until]
        for lease in late:
            self._drop(lease, "its valid_until passed before a refresh proved it held")
            # The agent may still hold it for this session: let it go.
            try:
                lease._delete()
            except LockmeshError:
                pass

    def _next_delay(self, now: float) -> float:
        """When to refresh next: a third of the TTL, and a third of the
        shortest lease's validity left, so that two refreshes may fail
        before anything lapses."""
        with self._mu:
            ends = [lease.valid_until for lease in self._leases.values()]
        d = self.ttl / 3
        for end in ends:
            d = min(d, (end - now) / 3)
        return max(d, 0.02)

    def _bound(self, now: float) -> float:
        """How long a refresh sent now may take before it is too late."""
        with self._mu:
            ends = [self.expires] + [lease.valid_until for lease in self._leases.values()]
        return min(self.client.timeout, max(min(ends) - now, 0.05))

    def _keep(self) -> None:
        while not self.closed and not self.lost.is_set():
            woken = self._wake.wait(self._next_delay(time.monotonic()))
            self._wake.clear()
            if self.closed or self.lost.is_set():
                return
            if woken:
                continue  # a new lease, or closing: work the delay out again
            now = time.monotonic()
            self._expire(now)
            if self.lost.is_set():
                return
            try:
                self._refresh(self._bound(now))
            except SessionExpiredError:
                return
            except LockmeshError as e:
                log.warning("lockmesh: refreshing session %s: %s", self.id, e)
                self._expire(time.monotonic())

    def _lose(self, reason: str) -> None:
        with self._mu:
            if self.lost.is_set() or self.closed:
                return
            self.lost_reason = reason
            leases = list(self._leases.values())
            self._leases.clear()
            callbacks = list(self._callbacks)
            self.lost.set()
        self._wake.set()
        for lease in leases:
            lease._lose("session lost: " + reason)
        for fn in callbacks:
            try:
                fn(reason)
            except Exception:  # a callback's failure is its own
                log.exception("lockmesh: an on_lost callback of session %s failed", self.id)

    def _drop(self, lease: "Lease", reason: str) -> None:
        with self._mu:
            if self._leases.get((lease.kind, lease.name)) is lease:
                del self._leases[(lease.kind, lease.name)]
        lease._lose(reason)

    def _forget(self, lease: "Lease") -> None:
        with self._mu:
            if self._leases.get((lease.kind, lease.name)) is lease:
                del self._leases[(lease.kind, lease.name)]

    def leases(self) -> List["Lease"]:
        """What the session holds, as far as it knows."""
        with self._mu:
            return list(self._leases.values())

    # -- ending

    def close(self) -> None:
        """Ends the session: the agent releases everything it holds. Safe
        to call more than once; a session already gone is not an error."""
        if self.closed:
            return
        self.closed = True
        self._wake.set()
        with self._mu:
            leases = list(self._leases.values())
            self._leases.clear()
        for lease in leases:
            lease.released = True
        try:
            self.client._request("DELETE", "/v1/sessions/" + self.id)
        except SessionExpiredError:
            pass
        finally:
            if self._keeper is not None and self._keeper is not threading.current_thread():
                self._keeper.join(self.client.timeout)

    def _close_quietly(self) -> None:
        try:
            self.close()
        except LockmeshError as e:
            log.warning("lockmesh: closing session %s: %s", self.id, e)


class Lease:
    """A lock, semaphore slot or leadership held for a session.

    ``token`` is the fencing token; ``valid_until`` the time (on
    ``time.monotonic()``) until which the lease is proved held: the moment
    the last acquire or refresh left plus the ``valid_ms`` the agent
    answered. The session's keeper moves it on. ``lost`` is set once the
    lease is lost (not by ``release()``); ``lost_reason`` says why.
    """

    def __init__(self, session: Session, data: Dict[str, Any], sent: float) -> None:
        self.session = session
        self.kind: str = data["kind"]
        self.key: str = data["key"]
        self.name: str = data["name"]
        self.n: int = data.get("n", 0)
        self.token: int = data["token"]
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self.released = False
        self._owns_session = False
        self._got = time.monotonic()  # when the grant's answer came
        self._update(data, sent)

    def _update(self, g: Dict[str, Any], sent: float) -> None:
        self.value: str = g.get("value", "")
        self.ttl: float = g["ttl_ms"] / 1000.0
        self.deadline: str = g.get("deadline", "")  # the agent's wall clock: for people
        self.valid_until: float = sent + g["valid_ms"] / 1000.0

    def __repr__(self) -> str:
        return "lockmesh.Lease(%s %r, token=%d)" % (self.kind, self.key, self.token)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def valid(self) -> bool:
        """True while the lease is proved held: act under it only then."""
        return not self.lost.is_set() and not self.released and time.monotonic() < self.valid_until

    def remaining(self) -> float:
        """Seconds left until ``valid_until`` (0 once not valid)."""
        if self.lost.is_set() or self.released:
            return 0.0
        return max(self.valid_until - time.monotonic(), 0.0)

    def _lose(self, reason: str) -> None:
        if self.lost.is_set() or self.released:
            return
        self.lost_reason = reason
        self.lost.set()

    def _path(self) -> str:
        base = {"lock": "/v1/locks/", "semaphore": "/v1/semaphores/", "election": "/v1/elections/"}[self.kind]
        return base + _quote(self.name)

    def _delete(self) -> None:
        self.session.client._request("DELETE", self._path(), query={"session": self.session.id})

    def set_value(self, value: str) -> None:
        """Publishes a new value (``""`` clears it) while holding it."""
        sent = time.monotonic()
        # Setting the same value again is harmless: repeatable.
        _, data, _ = self.session.client._request(
            "PATCH", self._path(), body={"session": self.session.id, "value": value}, repeatable=True)
        if not self.lost.is_set():
            self._update(data, sent)

    def release(self) -> None:
        """Lets the lease go (and ends its session if ``Client.lock`` made
        it). Releasing a lease already released or lost is not an error."""
        if self.released:
            return
        was_lost = self.lost.is_set()
        self.released = True
        self.session._forget(self)
        try:
            if self._owns_session:
                self.session.close()
            elif not was_lost:
                self._delete()
        except (NotHeldError, LeaseLostError, SessionExpiredError):
            pass


class Leadership(Lease):
    """The leadership of an election: ``proclaim`` a new value, ``resign``."""

    def proclaim(self, value: str) -> None:
        """Publishes a new value to the election's observers."""
        self.set_value(value)

    def resign(self) -> None:
        """Gives the leadership up (the next candidate in line takes it)."""
        self.release()


class Watch(Generic[T]):
    """An iterator over the states of a key or an election, by long-poll.

    Each ``next()`` blocks until a state whose index differs from the last
    one seen (``index``) arrives. ``close()``, from any thread, ends the
    iteration (StopIteration). Errors of the agent or the way to it are
    raised; resume with the last ``index``.
    """

    def __init__(self, client: Client, path: str, parse: Callable[[Dict[str, Any]], T],
                 index: Optional[str], poll: float) -> None:
        self._client, self._path, self._parse = client, path, parse
        self.index: Optional[str] = index
        self._poll = poll
        self._closed = False
        self._mu = threading.Lock()
        self._conn: Optional[http.client.HTTPConnection] = None

    def __iter__(self) -> "Watch[T]":
        return self

    def __enter__(self) -> "Watch[T]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __next__(self) -> T:
        while not self._closed:
            q = {"wait": _duration(self._poll)}
            if self.index:
                q["index"] = self.index
            try:
                _, data, _ = self._client._request("GET", self._path, query=q, wait=self._poll,
                                                   repeatable=True, on_connection=self._track)
            except TransportError:
                if self._closed:
                    break
                raise
            finally:
                with self._mu:
                    self._conn = None
            if self._closed:
                break
            if data["index"] != self.index:
                self.index = data["index"]
                return self._parse(data)
        raise StopIteration

    def _track(self, conn: http.client.HTTPConnection) -> None:
        with self._mu:
            self._conn = conn
            closed = self._closed
        if closed:
            raise OSError("watch closed")

    def close(self) -> None:
        """Ends the watch, interrupting a long-poll in flight."""
        with self._mu:
            self._closed = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
