// Type declarations of lockmesh.mjs, a client of the lockmesh agent's HTTP
// API (docs/http-api.md). Durations are milliseconds (a number) or Go
// duration strings ("1m30s"); fencing tokens are bigints.

import { EventEmitter } from 'node:events';

/** Milliseconds, or a Go duration string such as "10s". */
export type Duration = number | string;

/** How long a call that does not wait may take, in milliseconds. */
export declare const DEFAULT_TIMEOUT: number;

/** $LOCKMESH_URL, else the agent's default unix socket. */
export declare function defaultURL(): string;

/** The problem codes of docs/http-api.md, "Errors". */
export type ProblemCode =
  | 'bad_request' | 'invalid_key' | 'invalid_option' | 'value_too_large' | 'unauthorized' | 'forbidden'
  | 'not_found' | 'session_not_found' | 'unknown_node' | 'method_not_allowed' | 'locked' | 'not_held'
  | 'semaphore_mismatch' | 'bad_voter_change' | 'session_expired' | 'lease_lost' | 'body_too_large'
  | 'unsupported_media_type' | 'too_many' | 'internal' | 'no_quorum' | 'not_ready' | 'upgrade_required'
  | 'closed' | 'timeout';

/** An RFC 9457 problem as the agent answers it. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: ProblemCode | string;
  holder?: string;
  token?: bigint;
  key?: string;
  retry_after_ms?: number;
  [field: string]: unknown;
}

export declare class LockmeshError extends Error {
  constructor(message: string, options?: { code?: string; status?: number; problem?: Problem; cause?: unknown });
  /** The problem's stable code; "transport" for a TransportError. */
  readonly code: ProblemCode | 'transport' | string;
  readonly status: number;
  readonly problem: Problem;
  readonly title: string;
  readonly detail: string;
  /** Milliseconds after which trying again makes sense, if the agent said. */
  readonly retryAfter: number | null;
}
/** The agent could not be reached, or did not answer in time; cause says why. */
export declare class TransportError extends LockmeshError {}
export declare class BadRequestError extends LockmeshError {}
export declare class InvalidKeyError extends BadRequestError {}
export declare class InvalidOptionError extends BadRequestError {}
export declare class ValueTooLargeError extends BadRequestError {}
export declare class UnauthorizedError extends LockmeshError {}
export declare class ForbiddenError extends LockmeshError {}
export declare class NotFoundError extends LockmeshError {}
export declare class SessionExpiredError extends LockmeshError {}
export declare class SessionNotFoundError extends SessionExpiredError {}
export declare class UnknownNodeError extends NotFoundError {}
export declare class LockedError extends LockmeshError {
  /** The node that holds it. */
  readonly holder: string;
  /** The holder's fencing token. */
  readonly token: bigint;
  readonly key: string;
}
export declare class NotHeldError extends LockmeshError {}
export declare class SemaphoreMismatchError extends LockmeshError {}
export declare class BadVoterChangeError extends LockmeshError {}
export declare class LeaseLostError extends LockmeshError {}
export declare class TooManyError extends LockmeshError {}
export declare class NoQuorumError extends LockmeshError {}
export declare class NotReadyError extends LockmeshError {}
export declare class UpgradeRequiredError extends LockmeshError {}
export declare class AgentClosedError extends LockmeshError {}
export declare class OperationTimeoutError extends LockmeshError {}

/** A key's state. */
export interface KeyState {
  key: string;
  held: boolean;
  /** The holding node ("" when free). */
  node: string;
  /** The holder's token, or the last grant's when free (0n: never granted). */
  token: bigint;
  value: string;
  /** Opaque: pass it back to wait for the next state. */
  index: string;
  /** Ms the holder's lease had left (listings only). */
  timeLeft: number | null;
}

/** An election's state (held false: nobody leads). */
export interface Leader {
  name: string;
  held: boolean;
  node: string;
  token: bigint;
  value: string;
  index: string;
}

export interface ClientOptions {
  /** http://host:port, https://host:port or unix:///path (default: defaultURL()). */
  url?: string;
  /** A bearer token (default: $LOCKMESH_API_TOKEN). */
  token?: string;
  /** Ms every call that does not wait may take (default 10000). */
  timeout?: number;
  /** Options of https.request: ca, cert, key, servername, rejectUnauthorized... */
  tls?: Record<string, unknown>;
}

export interface SessionOptions {
  /** The session's TTL (default: the agent's, 10 s). */
  ttl?: Duration;
  name?: string;
  /** Refresh on a timer (default true). */
  keepalive?: boolean;
}

export interface LockOptions {
  /** How long to wait in turn (absent or 0: try once). */
  wait?: Duration;
  /** The mesh lease's TTL (default: the agent's). */
  ttl?: Duration;
  value?: string;
}

export interface ClientLockOptions extends LockOptions {
  /** The TTL of the lock's own session. */
  sessionTTL?: Duration;
  /** The session's name (default: the key). */
  name?: string;
}

export interface WatchOptions {
  /** The index of the last state seen: start after it. */
  index?: string | null;
  /** How long each long-poll waits (default 60 s). */
  poll?: Duration;
  signal?: AbortSignal;
}

export declare class Client {
  constructor(options?: ClientOptions);
  readonly url: string;
  token: string;
  timeout: number;
  health(): Promise<{ ok: boolean; node: string }>;
  ready(options?: { wait?: Duration }): Promise<{ ready: boolean; node: string }>;
  status(): Promise<Record<string, any>>;
  voters(): Promise<Record<string, any>>;
  sessions(): Promise<Array<Record<string, any>>>;
  session(options?: SessionOptions): Promise<Session>;
  /** A lease under a session of its own, which release() ends. */
  lock(key: string, options?: ClientLockOptions): Promise<Lease>;
  /** Runs fn(lease) while holding key; releases it after. */
  withLock<T>(key: string, fn: (lease: Lease) => T | Promise<T>, options?: ClientLockOptions): Promise<T>;
  holder(key: string): Promise<KeyState>;
  locks(prefix?: string): Promise<KeyState[]>;
  watch(key: string, options?: WatchOptions): Watch<KeyState>;
  leader(name: string): Promise<Leader>;
  observe(name: string, options?: WatchOptions): Watch<Leader>;
}

export declare class Session extends EventEmitter {
  readonly client: Client;
  readonly id: string;
  readonly name: string;
  /** The session's TTL, ms. */
  readonly ttl: number;
  /** When the session ends unless refreshed, on performance.now()'s clock. */
  readonly expires: number;
  readonly lost: boolean;
  readonly lostReason: string | null;
  readonly closed: boolean;
  /** Aborted (reason: a SessionExpiredError) once the session is lost. */
  readonly signal: AbortSignal;
  lock(key: string, options?: LockOptions): Promise<Lease>;
  semaphore(name: string, n: number, options?: { wait?: Duration; value?: string }): Promise<Lease>;
  campaign(name: string, options?: { wait?: Duration; value?: string }): Promise<Leadership>;
  leases(): Lease[];
  refresh(): Promise<void>;
  close(): Promise<void>;
  on(event: 'lost', listener: (reason: string) => void): this;
  on(event: 'warning', listener: (err: LockmeshError) => void): this;
  once(event: 'lost', listener: (reason: string) => void): this;
  once(event: 'warning', listener: (err: LockmeshError) => void): this;
}

export declare class Lease extends EventEmitter {
  readonly session: Session;
  readonly kind: 'lock' | 'semaphore' | 'election';
  /** The lease's key: a semaphore's slot key (name#i). */
  readonly key: string;
  /** The lock's key, the semaphore's or the election's name. */
  readonly name: string;
  /** A semaphore's size. */
  readonly n: number;
  /** The fencing token. */
  readonly token: bigint;
  readonly value: string;
  /** The mesh lease's TTL, ms. */
  readonly ttl: number;
  /** The lease's deadline on the agent's wall clock: for people and logs. */
  readonly deadline: string;
  /** Until when (performance.now()) the lease is proved held. */
  readonly validUntil: number;
  readonly lost: boolean;
  readonly lostReason: string | null;
  readonly released: boolean;
  /** Aborted (reason: a LeaseLostError) once the lease is lost. */
  readonly signal: AbortSignal;
  valid(): boolean;
  remaining(): number;
  setValue(value: string): Promise<void>;
  release(): Promise<void>;
  on(event: 'lost', listener: (reason: string) => void): this;
  once(event: 'lost', listener: (reason: string) => void): this;
}

export declare class Leadership extends Lease {
  proclaim(value: string): Promise<void>;
  resign(): Promise<void>;
}

export declare class Watch<T> implements AsyncIterableIterator<T> {
  /** The index of the last state seen. */
  readonly index: string | null;
  [Symbol.asyncIterator](): Watch<T>;
  next(): Promise<IteratorResult<T, undefined>>;
  return(): Promise<IteratorResult<T, undefined>>;
  close(): void;
}
