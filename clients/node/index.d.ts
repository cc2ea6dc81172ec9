// Types for jobq (clients/node).  Ids and lease tokens are PostgreSQL bigints
// and stay strings: a lease token does not fit in a JavaScript number.

import type { Pool, PoolConfig, QueryResult } from 'pg'

/** Anything that runs a query: a pg.Pool, a pg.Client, a pool client. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<QueryResult<any>>
}

export type JobId = string
export type Priority = number | 'low' | 'medium' | 'high' | 'critical'

export interface EnqueueOptions {
  /** default 'default' */
  queue?: string
  /** higher runs first; a number or a label (low 0, medium 10, high 20, critical 30) */
  priority?: Priority
  /** when the job becomes ready (default now(), the database's clock) */
  runAt?: Date | string
  /** seconds from now (the database's clock); not with runAt */
  runIn?: number
  /** default: the queue's */
  maxRetries?: number
  idempotencyKey?: string
  concurrencyKey?: string
  /** parent job ids (jobq 0.2.0) */
  dependsOn?: JobId[]
  /** 'cancel' (default) or 'run' (jobq 0.2.0) */
  onParentFailure?: 'cancel' | 'run'
  /** run on this client instead (e.g. one inside the caller's BEGIN ... COMMIT) */
  client?: Queryable
}

export interface EnqueueManyOptions extends Omit<EnqueueOptions, 'idempotencyKey'> {
  /** one key per payload, in order */
  idempotencyKeys?: Array<string | null>
}

export interface Enqueued {
  jobId: JobId
  /** false: a job with this kind and idempotency key existed; it is returned unchanged */
  created: boolean
}

export type Payload = Record<string, unknown>

export function enqueue(db: Queryable, kind: string, payload?: Payload, opts?: Omit<EnqueueOptions, 'client'>): Promise<Enqueued>
export function enqueueMany(db: Queryable, kind: string, payloads: Payload[], opts?: Omit<EnqueueManyOptions, 'client'>): Promise<Enqueued[]>

export interface ProducerOptions {
  /** outages and idle connections lost are logged here (default console) */
  logger?: Logger
  /**
   * seconds for which a call on a pool whose every job has an idempotency key is sent again
   * (100 ms doubling to 2 s, jittered) while the database cannot be reached; a first try that
   * had committed then answers created: false.  Default 30; 0: never.
   */
  retryFor?: number
}

/** What a failed enqueue on a pool throws: an Error of pg or Node's, marked */
export interface EnqueueError extends Error {
  /** true: a try may have committed (the connection died after it was sent); false: none did */
  jobqInDoubt?: boolean
}

export class Producer {
  /**
   * a pool or client of the caller's, or a config / connection string for a pool of its own;
   * a pool gets the library's 'error' listener (an idle connection lost is logged at warn
   * with opts.logger, default console)
   */
  constructor(db?: Queryable | PoolConfig | string, opts?: ProducerOptions)
  readonly db: Queryable
  /**
   * On a pool: with an idempotency key, tried again while the database cannot be reached
   * (retryFor); a failure has jobqInDoubt (EnqueueError).  On a client: sent once.
   */
  enqueue(kind: string, payload?: Payload, opts?: EnqueueOptions): Promise<Enqueued>
  /** as enqueue; tried again only when every job has an idempotency key */
  enqueueMany(kind: string, payloads: Payload[], opts?: EnqueueManyOptions): Promise<Enqueued[]>
  /** ends the pool the producer made; a pool or client given is left alone */
  end(): Promise<void>
}

export class Job<P = any> {
  readonly id: JobId
  readonly leaseToken: string
  readonly queue: string
  readonly kind: string
  readonly payload: P
  readonly priority: number
  /** retries used so far; attempt = retryCount + 1 */
  readonly retryCount: number
  readonly attempt: number
  readonly maxRetries: number
  /** what an earlier attempt saved with checkpoint(), or null */
  lastCheckpoint: any
  readonly enqueuedAt: Date
  leaseExpiresAt: Date
  /** aborted on timeout (HandlerTimeout), lost lease (LeaseLost), hand-back at shutdown (HandedBack) */
  readonly signal: AbortSignal
  /** save progress for the next attempt; rejects with LeaseLost when the lease is gone */
  checkpoint(data: unknown): Promise<void>
  /** extend the lease now (default: the worker's lease); rejects with LeaseLost */
  extend(seconds?: number): Promise<Date>
}

export type Handler<P = any> = (job: Job<P>) => unknown | Promise<unknown>

export type Outcome = 'completed' | 'retrying' | 'failed' | 'snoozed' | 'lost' | 'handedBack' | 'unreported'

export interface Logger {
  debug?(msg: string): void
  info?(msg: string): void
  warn?(msg: string): void
  error?(msg: string): void
}

export interface FinishInfo {
  /** what the attempt's history keeps as its error ('Class: message'), null when it completed */
  error: string | null
  /** what the handler threw (or the error made of a result that could not be sent), if anything */
  thrown?: unknown
}

export interface Hooks {
  onClaim?(info: { queue: string, count: number }): void
  onStart?(job: Job): void
  onFinish?(job: Job, outcome: Outcome | null, durationMs: number, info: FinishInfo): void
  onRenew?(info: { count: number }): void
  onError?(error: Error, context: {
    op: 'start' | 'claim' | 'report' | 'renew' | 'heartbeat' | 'unregister' | 'release' | 'pool', queue?: string, job?: Job
  }): void
}

export interface WorkerOptions {
  /** a pool of the caller's (left open at the end; the library adds its own 'error' listener) ... */
  pool?: Pool
  /** ... or a config / connection string for a pool of the worker's own (default: the libpq environment) */
  connection?: PoolConfig | string
  /** default 'default' */
  queue?: string
  /** several queues, one claim loop each, sharing the concurrency */
  queues?: string[]
  /** jobs run at once in this worker, over all its queues (default 10) */
  concurrency?: number
  /** most jobs per claim (default: concurrency) */
  batch?: number
  /** most jobs claimed ahead of free slots, waiting under lease (default null: measured, the jobs
   * the handlers finish during one claim round trip, at most concurrency; 0: none) */
  prefetch?: number | null
  /** seconds (default 30) */
  lease?: number
  /** renew leases (and heartbeat) every lease * renewEvery seconds, 15 s at most (default 1/3) */
  renewEvery?: number
  /** seconds an idle claim sleeps in the server for a job (default 5) */
  wait?: number
  /** default handler time limit, seconds (default none) */
  timeout?: number
  /** seconds running jobs get to finish after stop() (default 30) */
  shutdownGrace?: number
  /** default hostname:pid; the worker registry's key (jobq.app_workers) */
  workerId?: string
  /** stop() on SIGTERM and SIGINT while run() runs (default true) */
  handleSignals?: boolean
  /** default console */
  logger?: Logger
  /** default 'info' */
  logLevel?: 'debug' | 'info' | 'warn' | 'error' | 'silent'
  hooks?: Hooks
}

export class Worker {
  constructor(opts?: WorkerOptions)
  readonly pool: Pool
  readonly workerId: string
  readonly kinds: string[]
  /** jobs claimed ahead of free slots now: prefetch, or the measured number */
  readonly ahead: number
  /** register the handler of a kind; opts.timeout (seconds) overrides the worker's */
  handle<P = any>(kind: string, fn: Handler<P>, opts?: { timeout?: number }): this
  /** work until stop() */
  run(): Promise<{ handedBack: number }>
  /** stop claiming, let running jobs finish within the grace period, hand back the rest; again: hand back at once */
  stop(opts?: { grace?: number }): Promise<{ handedBack: number }>
}

/** the dead letter at once: jobq.fail(..., retryable => false) */
export class Permanent extends Error {
  constructor(message?: string, options?: { cause?: unknown })
}
/** jobq.fail(..., retry_in => seconds): again after exactly that long; spends a retry */
export class RetryIn extends Error {
  constructor(seconds: number, message?: string, options?: { cause?: unknown })
  readonly seconds: number
}
/** jobq.snooze: again after seconds, no retry spent */
export class Snooze extends Error {
  constructor(seconds: number, message?: string, options?: { cause?: unknown })
  readonly seconds: number
}
export class LeaseLost extends Error {}
export class HandlerTimeout extends Error {
  readonly seconds: number
}
export class HandedBack extends Error {}
