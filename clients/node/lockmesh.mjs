// A client of the lockmesh agent's HTTP API (docs/http-api.md): an ES
// module with no dependencies, for Node 18 and later.
//
//   import { Client } from 'lockmesh';
//   const client = new Client({ url: 'http://127.0.0.1:8500' });
//   await client.withLock('backups/nightly', async (lease) => {
//     await backup({ fencingToken: lease.token, signal: lease.signal });
//   }, { wait: 30_000 });
//
// Every lock, semaphore slot and leadership is held for a session, which
// the agent keeps only while the client refreshes it. A Session refreshes
// itself on a timer; when it can no longer prove that it holds something,
// it aborts the signal of the session or of the lease and emits 'lost'.
//
// The timing guarantee: act under a lease only while lease.valid(), that
// is until lease.validUntil, a time on performance.now()'s clock computed
// from the moment the request was sent plus the valid_ms the agent
// answered; and pass lease.token (the fencing token, a bigint) with every
// write to the shared resource, which should refuse tokens lower than one
// it has seen.

import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';

/** How long a call that does not wait may take, in milliseconds. */
export const DEFAULT_TIMEOUT = 10_000;

// ------------------------------------------------------------------ errors

/** An error of the agent (an RFC 9457 problem) or of the way to it. */
export class LockmeshError extends Error {
  constructor(message, { code = '', status = 0, problem = {}, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    /** The problem's stable code (docs/http-api.md, "Errors"). */
    this.code = code;
    this.status = status;
    this.problem = problem;
    this.title = problem.title ?? '';
    this.detail = problem.detail ?? message;
    /** Milliseconds after which trying again makes sense, if the agent said. */
    this.retryAfter = problem.retry_after_ms ?? null;
  }
}

/** The agent could not be reached, or did not answer in time (code "transport"). */
export class TransportError extends LockmeshError {}
export class BadRequestError extends LockmeshError {}
export class InvalidKeyError extends BadRequestError {}
export class InvalidOptionError extends BadRequestError {}
export class ValueTooLargeError extends BadRequestError {}
export class UnauthorizedError extends LockmeshError {}
export class ForbiddenError extends LockmeshError {}
export class NotFoundError extends LockmeshError {}
/** The session ended (expired, deleted). */
export class SessionExpiredError extends LockmeshError {}
/** The agent does not know the session (ended long ago, or the agent restarted): as gone as an expired one. */
export class SessionNotFoundError extends SessionExpiredError {}
export class UnknownNodeError extends NotFoundError {}
/** Held by another: holder (a node) and token. */
export class LockedError extends LockmeshError {
  constructor(message, opts = {}) {
    super(message, opts);
    this.holder = this.problem.holder ?? '';
    this.token = this.problem.token ?? 0n;
    this.key = this.problem.key ?? '';
  }
}
export class NotHeldError extends LockmeshError {}
export class SemaphoreMismatchError extends LockmeshError {}
export class BadVoterChangeError extends LockmeshError {}
export class LeaseLostError extends LockmeshError {}
export class TooManyError extends LockmeshError {}
export class NoQuorumError extends LockmeshError {}
export class NotReadyError extends LockmeshError {}
export class UpgradeRequiredError extends LockmeshError {}
export class AgentClosedError extends LockmeshError {}
/** 504: a read or change did not finish in time on the agent. */
export class OperationTimeoutError extends LockmeshError {}

const ERRORS = {
  bad_request: BadRequestError,
  invalid_key: InvalidKeyError,
  invalid_option: InvalidOptionError,
  value_too_large: ValueTooLargeError,
  body_too_large: BadRequestError,
  unsupported_media_type: BadRequestError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  not_found: NotFoundError,
  session_not_found: SessionNotFoundError,
  unknown_node: UnknownNodeError,
  locked: LockedError,
  not_held: NotHeldError,
  semaphore_mismatch: SemaphoreMismatchError,
  bad_voter_change: BadVoterChangeError,
  session_expired: SessionExpiredError,
  lease_lost: LeaseLostError,
  too_many: TooManyError,
  no_quorum: NoQuorumError,
  not_ready: NotReadyError,
  upgrade_required: UpgradeRequiredError,
  closed: AgentClosedError,
  timeout: OperationTimeoutError,
};

function problemError(status, text) {
  let p;
  try {
    p = parseJSON(text);
    if (p === null || typeof p !== 'object') throw new Error();
  } catch {
    p = { detail: text.trim() };
  }
  const code = String(p.code ?? '');
  const Cls = ERRORS[code] ?? LockmeshError;
  return new Cls(`${code || 'http'} (${status}): ${p.detail || p.title || ''}`, { code, status, problem: p });
}

// ------------------------------------------------------------------ values

// Fencing tokens are unsigned 64-bit integers: JSON numbers past 2^53
// lose digits in a JS number, so every "token" is read as a bigint. (Go
// writes no spaces, and a quote inside a string is escaped, so
// `{"token":` or `,"token":` starts a member, never string content.)
const TOKEN = /([{,]"token":)(\d+)/g;

function parseJSON(text) {
  return JSON.parse(text.replace(TOKEN, '$1"\\u0000$2"'), (k, v) =>
    k === 'token' && typeof v === 'string' && v.charCodeAt(0) === 0 ? BigInt(v.slice(1)) : v);
}

function keyState(d) {
  return {
    key: d.key, held: d.held, node: d.node ?? '', token: d.token ?? 0n, value: d.value ?? '',
    index: d.index ?? '', timeLeft: d.time_left_ms ?? null,
  };
}

function leaderState(d) {
  return { name: d.name, held: d.held, node: d.node ?? '', token: d.token ?? 0n, value: d.value ?? '', index: d.index ?? '' };
}

/** A Go duration string for d: milliseconds (a number), or a string as it is. */
function goDuration(d) {
  if (typeof d === 'string') return d;
  if (!Number.isFinite(d) || d < 0) throw new RangeError(`duration ${d}: want milliseconds >= 0 or a string such as "10s"`);
  return `${Math.round(d)}ms`;
}

const UNITS = { h: 3_600_000, m: 60_000, s: 1000, ms: 1, us: 1e-3, 'µs': 1e-3, ns: 1e-6 };

/** d in milliseconds (a number as it is, or a Go duration string). */
function millis(d) {
  if (typeof d !== 'string') return Number(d);
  if (/^0+(\.0*)?$/.test(d)) return 0;
  const re = /(\d+(?:\.\d*)?)(h|ms|m|s|us|µs|ns)/gy;
  let total = 0;
  let m;
  let at = 0;
  while ((m = re.exec(d)) !== null) {
    total += Number(m[1]) * UNITS[m[2]];
    at = re.lastIndex;
  }
  if (at !== d.length || at === 0) throw new RangeError(`not a duration: ${JSON.stringify(d)}`);
  return total;
}

const quote = (key) => encodeURIComponent(key);

// sessionName is key, cut to the 256 bytes a session's name may have.
function sessionName(key) {
  let name = key;
  while (Buffer.byteLength(name) > 256) name = name.slice(0, -1);
  if (/[\ud800-\udbff]$/.test(name)) name = name.slice(0, -1); // half a surrogate pair
  return name;
}

/**
 * Where a Client connects without a url: $LOCKMESH_URL, else the agent's
 * default unix socket ($XDG_RUNTIME_DIR/lockmesh-http.sock, or
 * /tmp/lockmesh-UID-http.sock).
 */
export function defaultURL() {
  if (process.env.LOCKMESH_URL) return process.env.LOCKMESH_URL;
  if (process.env.XDG_RUNTIME_DIR) return 'unix://' + path.join(process.env.XDG_RUNTIME_DIR, 'lockmesh-http.sock');
  return 'unix://' + path.join(process.env.TMPDIR || '/tmp', `lockmesh-${process.getuid()}-http.sock`);
}

// ------------------------------------------------------------------ transport

// Retries of a call, and the pause before each.
const RETRY_PAUSES = [50, 200, 500];

const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A client of one agent's HTTP API. It holds no connection (each call
 * opens its own).
 */
export class Client {
  /**
   * @param {object} [options]
   * @param {string} [options.url] http://host:port, https://host:port or
   *   unix:///path/to/lockmesh-http.sock (default: defaultURL())
   * @param {string} [options.token] a bearer token of the agent's (default:
   *   $LOCKMESH_API_TOKEN; none is needed on the unix socket or on an agent
   *   without tokens)
   * @param {number} [options.timeout] ms that every call that does not
   *   wait may take; one that waits gets its wait on top
   * @param {object} [options.tls] options of https.request: ca, cert, key, ...
   */
  constructor({ url, token, timeout = DEFAULT_TIMEOUT, tls } = {}) {
    this.url = url || defaultURL();
    this.token = token ?? (process.env.LOCKMESH_API_TOKEN || '');
    this.timeout = timeout;
    this._tls = tls ?? {};
    if (this.url.startsWith('/')) {
      this._target = { socketPath: this.url, prefix: '' };
    } else {
      const u = new URL(this.url);
      if (u.protocol === 'unix:') {
        this._target = { socketPath: decodeURIComponent(u.pathname), prefix: '' };
      } else if (u.protocol === 'http:' || u.protocol === 'https:') {
        this._target = {
          https: u.protocol === 'https:', host: u.hostname.replace(/^\[|\]$/g, ''),
          port: u.port || (u.protocol === 'https:' ? 443 : 80), prefix: u.pathname.replace(/\/+$/, ''),
        };
      } else {
        throw new TypeError(`url ${this.url}: want http://, https:// or unix://`);
      }
    }
  }

  /**
   * Sends a request; resolves to { status, data, headers }, or rejects
   * with the problem's LockmeshError.
   *
   * A call is tried again (at most RETRY_PAUSES.length times, within its
   * time) when the connection failed before the request left, and, if
   * repeatable (the API says repeating it is harmless), when it failed
   * before an answer came. Answers are never retried.
   */
  async _request(method, p, { body, query, wait = 0, timeout, repeatable = false, signal } = {}) {
    const deadline = performance.now() + (timeout ?? this.timeout) + wait;
    let target = this._target.prefix + p;
    if (query) target += '?' + new URLSearchParams(query).toString();
    const headers = { Accept: 'application/json' };
    let payload;
    if (body !== undefined) {
      payload = Buffer.from(JSON.stringify(body));
      headers['Content-Type'] = 'application/json';
      headers['Content-Length'] = String(payload.length);
    }
    if (this.token) headers.Authorization = 'Bearer ' + this.token;
    for (let attempt = 0; ; attempt++) {
      const left = deadline - performance.now();
      let res;
      try {
        res = await this._once(method, target, payload, headers, Math.max(left, 1), signal);
      } catch (e) {
        const again = !e.sent || repeatable;
        if (signal?.aborted || !again || attempt >= RETRY_PAUSES.length || left <= RETRY_PAUSES[attempt]) {
          throw new TransportError(`${method} ${p}: ${e.message}`, { code: 'transport', cause: e });
        }
        await delay(RETRY_PAUSES[attempt]);
        continue;
      }
      if (res.status >= 400) throw problemError(res.status, res.text);
      return { status: res.status, data: res.text ? parseJSON(res.text) : null, headers: res.headers };
    }
  }

  // _once makes one attempt. A failure carries sent: whether the request
  // may have reached the agent.
  _once(method, target, payload, headers, timeoutMs, signal) {
    return new Promise((resolve, reject) => {
      const t = this._target;
      const opts = t.socketPath
        ? { socketPath: t.socketPath, path: target }
        : { host: t.host, port: t.port, path: target, ...(t.https ? this._tls : {}) };
      let sent = false;
      let settled = false;
      const finish = (err, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (err) {
          err.sent = sent;
          reject(err);
        } else {
          resolve(value);
        }
      };
      const req = (t.https ? https : http).request({ ...opts, method, headers, agent: false }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => finish(null, { status: res.statusCode, text: Buffer.concat(chunks).toString('utf8'), headers: res.headers }));
        res.on('error', (e) => finish(e));
        res.on('close', () => finish(new Error('the connection closed before the answer ended')));
      });
      const timer = setTimeout(() => req.destroy(new Error(`no answer within ${Math.round(timeoutMs)} ms`)), timeoutMs);
      const onAbort = () => req.destroy(new Error('aborted'));
      if (signal?.aborted) onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      req.on('socket', (s) => {
        if (s.connecting) s.once('connect', () => { sent = true; });
        else sent = true;
      });
      req.on('error', (e) => finish(e));
      req.end(payload);
    });
  }

  // ---------------------------------------------------------------- meta

  /** { ok: true, node } while the agent runs. */
  async health() {
    return (await this._request('GET', '/v1/health', { repeatable: true })).data;
  }

  /** { ready: true, node } once the node is ready, waiting up to wait ms; NotReadyError otherwise. */
  async ready({ wait = 0 } = {}) {
    const w = millis(wait);
    const query = w > 0 ? { wait: goDuration(wait) } : undefined;
    return (await this._request('GET', '/v1/ready', { query, wait: w, repeatable: true })).data;
  }

  /** The node's status and the API's counts. */
  async status() {
    return (await this._request('GET', '/v1/status', { repeatable: true })).data;
  }

  /** The voter configuration. */
  async voters() {
    return (await this._request('GET', '/v1/voters', { repeatable: true })).data;
  }

  /** Every session of the agent (an admin token's call). */
  async sessions() {
    return (await this._request('GET', '/v1/sessions', { repeatable: true })).data.sessions;
  }

  // ---------------------------------------------------------------- sessions

  /**
   * Creates a session of ttl (default: the agent's, 10 s). With keepalive
   * (the default) a timer refreshes it until it is closed; without, call
   * refresh() within the TTL. Creating a session is not repeated on a
   * failure: one whose answer was lost ends by its TTL.
   */
  async session({ ttl, name, keepalive = true } = {}) {
    const body = {};
    if (ttl !== undefined) body.ttl = goDuration(ttl);
    if (name) body.name = name;
    const sent = performance.now();
    const { data } = await this._request('POST', '/v1/sessions', { body });
    return new Session(this, data, sent, { keepalive });
  }

  // ---------------------------------------------------------------- locks

  /**
   * Takes key under a new session of its own, which lease.release() ends.
   * Without wait it tries once (LockedError names the holder); with it, it
   * waits in turn at most that long (capped by the agent's max_wait, 5 min
   * by default).
   */
  async lock(key, { wait, ttl, value, sessionTTL, name } = {}) {
    const s = await this.session({ ttl: sessionTTL, name: name ?? sessionName(key) });
    let lease;
    try {
      lease = await s.lock(key, { wait, ttl, value });
    } catch (e) {
      await s.close().catch(() => {});
      throw e;
    }
    lease._ownsSession = true;
    return lease;
  }

  /**
   * Runs fn(lease) while holding key, and releases it after (fn's error,
   * if any, wins over the release's). Watch lease.signal, or check
   * lease.valid(), to stop in time.
   */
  async withLock(key, fn, options = {}) {
    const lease = await this.lock(key, options);
    let ok = false;
    try {
      const result = await fn(lease);
      ok = true;
      return result;
    } finally {
      try {
        await lease.release();
      } catch (e) {
        if (ok) throw e;
      }
    }
  }

  /** Who holds key now (a linearizable read). */
  async holder(key) {
    return keyState((await this._request('GET', '/v1/locks/' + quote(key), { repeatable: true })).data);
  }

  /** The held locks under prefix that the caller may read. */
  async locks(prefix = '') {
    const { data } = await this._request('GET', '/v1/locks', { query: { prefix }, repeatable: true });
    return data.locks.map(keyState);
  }

  /**
   * key's states, as an async iterator: the current one first (unless index
   * is one already seen: then the next), then each new one, by long-polls of
   * poll ms. Stop it with break, watch.close() or the signal; resume one that
   * failed with { index: watch.index }.
   */
  watch(key, options = {}) {
    return new Watch(this, '/v1/watch/' + quote(key), keyState, options);
  }

  // ---------------------------------------------------------------- elections

  /** Who leads election name now. */
  async leader(name) {
    return leaderState((await this._request('GET', '/v1/elections/' + quote(name), { repeatable: true })).data);
  }

  /** Election name's leaders, as watch(). */
  observe(name, options = {}) {
    return new Watch(this, '/v1/observe/' + quote(name), leaderState, options);
  }
}

const leaseKey = (kind, name) => kind + '\u0000' + name;

/**
 * A session of the agent: it owns the leases taken under it, and lives
 * while it is refreshed within its TTL.
 *
 * Events: 'lost' (reason) once the session is gone for a reason not its
 * own (expired, deleted elsewhere, the agent restarted or unreachable for
 * longer than its TTL); its signal is then aborted, and every lease of it
 * is lost with it. close() ends it and releases everything it holds.
 */
export class Session extends EventEmitter {
  constructor(client, data, sent, { keepalive = true } = {}) {
    super();
    this.client = client;
    this.id = data.id;
    this.name = data.name ?? '';
    /** The session's TTL, ms. */
    this.ttl = data.ttl_ms;
    /** When the session ends unless refreshed, on performance.now()'s clock. */
    this.expires = sent + data.remaining_ms;
    this.lost = false;
    this.lostReason = null;
    this.closed = false;
    this._ac = new AbortController();
    /** Aborted once the session is lost. */
    this.signal = this._ac.signal;
    this._leases = new Map();
    this._timer = null;
    this._keepalive = keepalive;
    if (keepalive) this._schedule();
  }

  /** Takes lock key for this session: once (no wait: LockedError if held), or waiting at most wait. */
  lock(key, { wait, ttl, value } = {}) {
    return this._take('lock', '/v1/locks/' + quote(key), key, { wait, ttl, value });
  }

  /** Takes one of the n slots of semaphore name (every user gives the same n). */
  semaphore(name, n, { wait, value } = {}) {
    return this._take('semaphore', '/v1/semaphores/' + quote(name), name, { wait, value, n });
  }

  /** Leads election name with value: tries once, or waits at most wait for the leader to go. */
  campaign(name, { value, wait } = {}) {
    return this._take('election', '/v1/elections/' + quote(name), name, { wait, value });
  }

  async _take(kind, p, name, { wait, ttl, value, n }) {
    const body = { session: this.id };
    const w = wait === undefined ? 0 : millis(wait);
    if (w > 0) body.wait = goDuration(wait);
    if (ttl !== undefined) body.ttl = goDuration(ttl);
    if (value) body.value = value;
    if (n) body.n = n;
    let sent = performance.now();
    // Repeatable: the agent answers a repeated acquire with the grant the
    // session holds.
    let { data } = await this.client._request('PUT', p, { body, wait: w, repeatable: true });
    if (performance.now() - sent > data.valid_ms / 3) {
      // It waited its turn: validUntil counted from when it was sent would
      // be near, or past. A refresh now gives a bound counted from now
      // (nobody has acted under the lease yet).
      ({ sent, grant: data } = await this._reanchor(kind, name));
    }
    const k = leaseKey(kind, name);
    let lease = this._leases.get(k);
    if (lease) {
      lease._update(data, sent);
    } else {
      lease = new (kind === 'election' ? Leadership : Lease)(this, data, sent);
      this._leases.set(k, lease);
    }
    if (this._keepalive && !this.closed && !this.lost) this._schedule(); // maybe sooner now
    return lease;
  }

  // _reanchor refreshes the session for a grant just received: its send
  // time and its entry in the answer (LeaseLostError if it is not there).
  async _reanchor(kind, name) {
    const sent = performance.now();
    let data;
    try {
      ({ data } = await this.client._request('POST', `/v1/sessions/${this.id}/refresh`, { repeatable: true }));
    } catch (e) {
      if (e instanceof SessionExpiredError && !this.closed) this._lose('session ended: ' + e.detail);
      throw e;
    }
    this._apply(data, sent);
    const grant = data.leases.find((g) => g.kind === kind && g.name === name);
    if (!grant) throw new LeaseLostError(`${kind} ${name} was lost as soon as it was granted`, { code: 'lease_lost' });
    return { sent, grant };
  }

  /** What the session holds, as far as it knows. */
  leases() {
    return [...this._leases.values()];
  }

  /**
   * Restarts the session's TTL now and renews every lease's validUntil.
   * SessionExpiredError once the session is gone (it is then lost).
   */
  refresh() {
    return this._refresh(this.client.timeout);
  }

  async _refresh(timeout) {
    const sent = performance.now();
    let data;
    try {
      ({ data } = await this.client._request('POST', `/v1/sessions/${this.id}/refresh`, { timeout, repeatable: true }));
    } catch (e) {
      if (e instanceof SessionExpiredError && !this.closed) this._lose('session ended: ' + e.detail);
      throw e;
    }
    this._apply(data, sent);
  }

  // _apply takes in a refresh's answer, sent at sent.
  _apply(data, sent) {
    this._expire(performance.now());
    if (this.lost || this.closed) return;
    this.expires = sent + data.remaining_ms;
    const listed = new Map(data.leases.map((g) => [leaseKey(g.kind, g.name), g]));
    for (const [k, lease] of this._leases) {
      const g = listed.get(k);
      if (g) lease._update(g, sent);
      // Granted before the refresh left, and not listed: lost.
      else if (lease._got < sent) this._drop(lease, 'the agent no longer lists it (lost while the session lived)');
    }
  }

  // _expire loses what has not been proved valid up to now.
  _expire(now) {
    if (this.closed || this.lost) return;
    if (now >= this.expires) {
      this._lose(`not refreshed within its ttl of ${this.ttl} ms`);
      return;
    }
    for (const lease of this._leases.values()) {
      if (now >= lease.validUntil) {
        this._drop(lease, 'its validUntil passed before a refresh proved it held');
        // The agent may still hold it for this session: let it go.
        lease._delete().catch(() => {});
      }
    }
  }

  // _nextDelay: a third of the TTL, and a third of the shortest lease's
  // validity left, so that two refreshes may fail before anything lapses.
  _nextDelay(now) {
    let d = this.ttl / 3;
    for (const lease of this._leases.values()) d = Math.min(d, (lease.validUntil - now) / 3);
    return Math.max(d, 20);
  }

  // _bound: how long a refresh sent now may take before it is too late.
  _bound(now) {
    let end = this.expires;
    for (const lease of this._leases.values()) end = Math.min(end, lease.validUntil);
    return Math.min(this.client.timeout, Math.max(end - now, 50));
  }

  _schedule() {
    if (this._refreshing) return; // _tick schedules when it is done
    clearTimeout(this._timer);
    this._timer = setTimeout(() => this._tick(), this._nextDelay(performance.now()));
  }

  async _tick() {
    this._timer = null;
    if (this.closed || this.lost) return;
    const now = performance.now();
    this._expire(now);
    if (this.lost) return;
    this._refreshing = true;
    try {
      await this._refresh(this._bound(now));
    } catch (e) {
      if (!(e instanceof SessionExpiredError)) {
        this.emit('warning', e);
        this._expire(performance.now());
      }
    } finally {
      this._refreshing = false;
    }
    if (!this.closed && !this.lost) this._schedule();
  }

  _lose(reason) {
    if (this.lost || this.closed) return;
    this.lost = true;
    this.lostReason = reason;
    clearTimeout(this._timer);
    const leases = [...this._leases.values()];
    this._leases.clear();
    for (const lease of leases) lease._lose('session lost: ' + reason);
    this._ac.abort(new SessionExpiredError(`session ${this.id} lost: ${reason}`, { code: 'session_expired' }));
    this.emit('lost', reason);
  }

  _drop(lease, reason) {
    this._forget(lease);
    lease._lose(reason);
  }

  _forget(lease) {
    const k = leaseKey(lease.kind, lease.name);
    if (this._leases.get(k) === lease) this._leases.delete(k);
  }

  /**
   * Ends the session: the agent releases everything it holds. Safe to call
   * more than once; a session already gone is not an error.
   */
  async close() {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this._timer);
    for (const lease of this._leases.values()) lease.released = true;
    this._leases.clear();
    try {
      await this.client._request('DELETE', '/v1/sessions/' + this.id);
    } catch (e) {
      if (!(e instanceof SessionExpiredError)) throw e;
    }
  }
}

/**
 * A lock, semaphore slot or leadership held for a session.
 *
 * token is the fencing token (a bigint); validUntil the time (on
 * performance.now()'s clock) until which the lease is proved held: the
 * moment the last acquire or refresh left plus the valid_ms the agent
 * answered. signal is aborted, and 'lost' emitted, once the lease is lost
 * (not by release()).
 */
export class Lease extends EventEmitter {
  constructor(session, data, sent) {
    super();
    this.session = session;
    this.kind = data.kind;
    this.key = data.key;
    this.name = data.name;
    this.n = data.n ?? 0;
    this.token = data.token;
    this.lost = false;
    this.lostReason = null;
    this.released = false;
    this._ownsSession = false;
    this._got = performance.now(); // when the grant's answer came
    this._ac = new AbortController();
    /** Aborted once the lease is lost. */
    this.signal = this._ac.signal;
    this._update(data, sent);
  }

  _update(g, sent) {
    this.value = g.value ?? '';
    /** The mesh lease's TTL, ms. */
    this.ttl = g.ttl_ms;
    /** The lease's deadline on the agent's wall clock: for people and logs. */
    this.deadline = g.deadline ?? '';
    this.validUntil = sent + g.valid_ms;
  }

  /** True while the lease is proved held: act under it only then. */
  valid() {
    return !this.lost && !this.released && performance.now() < this.validUntil;
  }

  /** Milliseconds left until validUntil (0 once not valid). */
  remaining() {
    if (this.lost || this.released) return 0;
    return Math.max(this.validUntil - performance.now(), 0);
  }

  _lose(reason) {
    if (this.lost || this.released) return;
    this.lost = true;
    this.lostReason = reason;
    this._ac.abort(new LeaseLostError(`${this.kind} ${this.key} lost: ${reason}`, { code: 'lease_lost' }));
    this.emit('lost', reason);
  }

  _path() {
    const base = { lock: '/v1/locks/', semaphore: '/v1/semaphores/', election: '/v1/elections/' }[this.kind];
    return base + quote(this.name);
  }

  _delete() {
    return this.session.client._request('DELETE', this._path(), { query: { session: this.session.id } });
  }

  /** Publishes a new value ("" clears it) while holding it. */
  async setValue(value) {
    const sent = performance.now();
    // Setting the same value again is harmless: repeatable.
    const { data } = await this.session.client._request('PATCH', this._path(),
      { body: { session: this.session.id, value }, repeatable: true });
    if (!this.lost) this._update(data, sent);
  }

  /**
   * Lets the lease go (and ends its session if Client.lock made it).
   * Releasing a lease already released or lost is not an error.
   */
  async release() {
    if (this.released) return;
    const wasLost = this.lost;
    this.released = true;
    this.session._forget(this);
    try {
      if (this._ownsSession) await this.session.close();
      else if (!wasLost) await this._delete();
    } catch (e) {
      if (!(e instanceof NotHeldError || e instanceof LeaseLostError || e instanceof SessionExpiredError)) throw e;
    }
  }
}

/** The leadership of an election. */
export class Leadership extends Lease {
  /** Publishes a new value to the election's observers. */
  proclaim(value) {
    return this.setValue(value);
  }

  /** Gives the leadership up (the next candidate in line takes it). */
  resign() {
    return this.release();
  }
}

/**
 * The states of a key or an election, by long-poll, as an async iterator.
 * next() resolves once a state whose index differs from the last one seen
 * (index) arrives; close(), break or the signal ends it.
 */
export class Watch {
  constructor(client, p, parse, { index = null, poll = 60_000, signal } = {}) {
    this._client = client;
    this._path = p;
    this._parse = parse;
    this.index = index;
    this._poll = millis(poll);
    this._ac = new AbortController();
    if (signal) {
      if (signal.aborted) this._ac.abort();
      else signal.addEventListener('abort', () => this._ac.abort(), { once: true });
    }
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  async next() {
    const signal = this._ac.signal;
    while (!signal.aborted) {
      const query = { wait: goDuration(this._poll) };
      if (this.index) query.index = this.index;
      let data;
      try {
        ({ data } = await this._client._request('GET', this._path, { query, wait: this._poll, repeatable: true, signal }));
      } catch (e) {
        if (signal.aborted) break;
        throw e;
      }
      if (signal.aborted) break;
      if (data.index !== this.index) {
        this.index = data.index;
        return { value: this._parse(data), done: false };
      }
    }
    return { value: undefined, done: true };
  }

  async return() {
    this.close();
    return { value: undefined, done: true };
  }

  /** Ends the watch, interrupting a long-poll in flight. */
  close() {
    this._ac.abort();
  }
}
