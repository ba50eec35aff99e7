// Types of rmq-scheduler-client (index.js). Request and answer members are
// snake_case, as the service speaks them (api/openapi.yaml); the client's
// own options are camelCase.
import type { Agent as HttpAgent } from 'node:http';
import type { Agent as HttpsAgent } from 'node:https';

// ---------------------------------------------------------------- jobs

export type JobStatus = 'pending' | 'publishing' | 'sent' | 'failed' | 'cancelled';
export type JobSource = 'http' | 'amqp' | 'schedule';
export type HeaderValue = string | number | boolean;

export interface JobProperties {
  content_type?: string;
  content_encoding?: string;
  correlation_id?: string;
  reply_to?: string;
  message_id?: string;
  type?: string;
  app_id?: string;
  user_id?: string;
  priority?: number;
  expiration?: string;
  persistent?: boolean;
}

/** Where a job goes and how it is published. */
export interface ScheduleTarget {
  exchange: string;
  routing_key: string;
  headers?: Record<string, HeaderValue>;
  properties?: JobProperties;
  max_attempts?: number;
  priority?: number;
}

/** Exactly one of body (JSON: a string, an object or an array) and body_base64 (bytes). */
export type ScheduleBody =
  { body: string | object | unknown[]; body_base64?: never } | { body_base64: string; body?: never };

/** Exactly one of delay_ms and deliver_at (RFC 3339). */
export type ScheduleWhen = { delay_ms: number; deliver_at?: never } | { deliver_at: string; delay_ms?: never };

/** A job request (POST /schedule): the service answers 400 to what this type refuses. */
export type ScheduleRequest = ScheduleTarget & ScheduleBody & ScheduleWhen;

/** What schedule() resolves to (`Prefer: return=minimal`). */
export interface JobMinimal {
  id: string;
  status: JobStatus;
  deliver_at: string;
}

export interface AttemptError {
  attempt: number;
  at: string;
  error: string;
}

export interface Job extends JobMinimal {
  source: JobSource;
  exchange: string;
  routing_key: string;
  next_attempt_at: string;
  created_at: string;
  updated_at: string;
  sent_at: string | null;
  failed_at: string | null;
  attempts: number;
  max_attempts: number;
  priority: number;
  held_by: string | null;
  held_ms: number;
  last_error: string | null;
  headers: Record<string, HeaderValue>;
  properties: JobProperties;
  body?: string | object | unknown[];
  body_base64?: string;
  schedule?: string;
  fire_at?: string;
  /** GET /jobs/{id} only. */
  attempt_errors?: AttemptError[];
  [member: string]: unknown;
}

export type JobOrder = 'due' | '-due' | 'created' | '-created';

/** The filter of GET /jobs, GET /jobs/count and POST /jobs/bulk (Dates are sent as RFC 3339). */
export interface JobFilter {
  status?: JobStatus;
  source?: JobSource;
  message_id?: string;
  schedule?: string;
  held_by?: string;
  exchange?: string;
  routing_key?: string;
  deliver_from?: string | Date;
  deliver_to?: string | Date;
  id_prefix?: string;
  /** `name:value` */
  header?: string;
  q?: string;
}

export interface ListFilter extends JobFilter {
  order?: JobOrder;
  /** The page size asked of the service (1-1000); the iterator follows `next` regardless. */
  limit?: number;
}

export interface JobCount {
  count: number;
  capped: boolean;
}

export interface When {
  deliverAt?: string | Date;
  delayMs?: number;
}

export interface BulkOperation {
  id: string;
  action: 'cancel' | 'retry';
  filter: Record<string, string>;
  state: 'running' | 'done' | 'failed';
  matched_so_far: number;
  done: number;
  skipped: number;
  errors: number;
  started_at: string;
  finished_at: string | null;
  [member: string]: unknown;
}

// ---------------------------------------------------------------- schedules and limits

export interface ScheduleSpec {
  cron?: string | null;
  every_ms?: number | null;
  timezone?: string | null;
  start_at?: string | null;
  end_at?: string | null;
  paused?: boolean;
  job: ScheduleTarget & ScheduleBody;
  [member: string]: unknown;
}

export interface Schedule {
  name: string;
  generation: number;
  next_runs: string[];
  [member: string]: unknown;
}

export interface LimitSpec {
  match?: { exchange?: string; routing_key?: string } | null;
  rate_per_s?: number | null;
  burst?: number | null;
  key?: string | null;
  max_buckets?: number | null;
  hold_when_queue_ready_over?: { queue: string; messages: number } | null;
}

export interface Limit extends LimitSpec {
  name: string;
  generation: number;
  created_at: string;
  updated_at: string;
  stats: Record<string, unknown> | null;
  [member: string]: unknown;
}

// ---------------------------------------------------------------- client

export interface RetryOptions {
  /** Tries in all, the first included. Default 5. */
  attempts?: number;
  /** Backoff base: try n waits uniformly in [0, min(capMs, baseMs * 2^(n-1))]. Default 50. */
  baseMs?: number;
  /** Default 2000. */
  capMs?: number;
}

export interface ClientOptions {
  /** http:// or https://; default http://127.0.0.1:8080. */
  url?: string;
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** Per HTTP attempt; past it the call fails with TimeoutError. Default 10000. */
  timeoutMs?: number;
  /**
   * How long a batch waits for more schedule() calls while fewer than
   * maxInFlight batches are out. Default 0: until the next turn of the event
   * loop (every call made in this turn joins it).
   */
  lingerMs?: number;
  /** Batches out at once; calls made meanwhile wait and join the next one. Default 8. */
  maxInFlight?: number;
  /** Items per POST /schedule/batch, at most 1000. Default 1000. */
  maxBatch?: number;
  /** Bytes per batch body. Default 900 KiB (the service's default limit is 1 MiB). */
  maxBatchBytes?: number;
  /** schedule() calls pending at once; more wait for room. Default 10000. */
  maxOutstanding?: number;
  retry?: RetryOptions;
  /** An http(s).Agent of your own (e.g. with `ca` for a private CA); default a keep-alive one. */
  agent?: HttpAgent | HttpsAgent;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
}

export interface CallOptions {
  signal?: AbortSignal;
}

export interface ScheduleOptions extends CallOptions {
  /** 1-200 printable ASCII characters without spaces; default a random UUID. */
  idempotencyKey?: string;
}

export interface RequestOptions extends CallOptions {
  query?: Record<string, string | number | boolean | Date | undefined | null>;
  body?: unknown;
  rawBody?: string | Buffer;
  headers?: Record<string, string>;
  /** May be repeated after a reset connection without changing the outcome. Default: GET, PUT, DELETE. */
  safe?: boolean;
}

export class Client {
  constructor(options?: ClientOptions);
  /** schedule() calls accepted and not settled. */
  readonly outstanding: number;
  /** Tries repeated so far (connection errors, 503, 429), for monitoring. */
  readonly retries: number;

  schedule(job: ScheduleRequest, options?: ScheduleOptions): Promise<JobMinimal>;
  scheduleMany(
    jobs: ScheduleRequest[],
    options?: CallOptions & { idempotencyKeys?: string[]; minimal?: true },
  ): Promise<JobMinimal[]>;
  scheduleMany(
    jobs: ScheduleRequest[],
    options: CallOptions & { idempotencyKeys?: string[]; minimal: false },
  ): Promise<Job[]>;
  scheduleOne(job: ScheduleRequest, options?: ScheduleOptions & { minimal?: false }): Promise<Job>;
  scheduleOne(job: ScheduleRequest, options: ScheduleOptions & { minimal: true }): Promise<JobMinimal>;
  /** Sends the calls waiting in the batcher now; resolves when the batches in flight are answered. */
  flush(): Promise<void>;

  get(id: string, options?: CallOptions): Promise<Job>;
  list(filter?: ListFilter, options?: CallOptions & { pageSize?: number }): AsyncIterableIterator<Job>;
  count(filter?: JobFilter & { order?: JobOrder }, options?: CallOptions & { max?: number }): Promise<JobCount>;
  reschedule(id: string, when: When, options?: CallOptions): Promise<Job>;
  cancel(id: string, options?: CallOptions): Promise<Job>;
  runNow(id: string, options?: CallOptions): Promise<Job>;
  retry(id: string, options?: When & CallOptions): Promise<Job>;
  bulk(
    request: { action: 'cancel' | 'retry'; filter?: JobFilter; all?: boolean } & CallOptions,
  ): Promise<BulkOperation>;
  bulkStatus(id: string, options?: CallOptions): Promise<BulkOperation>;
  waitBulk(
    id: string,
    options?: CallOptions & { onProgress?: (op: BulkOperation) => void; intervalMs?: number },
  ): Promise<BulkOperation>;

  putSchedule(name: string, spec: ScheduleSpec, options?: CallOptions): Promise<Schedule>;
  getSchedule(name: string, options?: CallOptions & { count?: number }): Promise<Schedule>;
  listSchedules(options?: CallOptions & { pageSize?: number }): AsyncIterableIterator<Schedule>;
  patchSchedule(name: string, patch: Partial<ScheduleSpec>, options?: CallOptions): Promise<Schedule>;
  deleteSchedule(name: string, options?: CallOptions): Promise<void>;
  runSchedule(name: string, options?: ScheduleOptions): Promise<Job>;

  putLimit(name: string, spec: LimitSpec, options?: CallOptions): Promise<Limit>;
  getLimit(name: string, options?: CallOptions): Promise<Limit>;
  listLimits(options?: CallOptions): Promise<Limit[]>;
  patchLimit(name: string, patch: LimitSpec, options?: CallOptions): Promise<Limit>;
  deleteLimit(name: string, options?: CallOptions): Promise<void>;

  stats(options?: CallOptions & { window?: string | number }): Promise<Record<string, unknown>>;
  status(options?: CallOptions): Promise<Record<string, any>>;
  failures(options?: CallOptions): Promise<{ window_jobs: number; groups: Record<string, unknown>[] }>;

  /** Any call of the API: the parsed answer (undefined for 204), or a typed error. */
  request<T = any>(method: string, path: string, options?: RequestOptions & { ok?: number[] }): Promise<T>;
  /** Sends what is buffered, waits for the batches in flight, releases the client's own agent. */
  close(): Promise<void>;
}

export default Client;

// ---------------------------------------------------------------- errors

export type ErrorCode =
  | 'invalid_argument'
  | 'unauthorized'
  | 'forbidden'
  | 'ui_read_only'
  | 'cross_origin'
  | 'host_not_allowed'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'unavailable'
  | 'storage_full'
  | 'search_timeout'
  | 'internal';

export interface BatchItemError {
  index: number;
  field?: string;
  message: string;
}

export interface RmqsErrorOptions {
  status?: number;
  code?: string;
  field?: string;
  errors?: BatchItemError[];
  retryAfterMs?: number;
  body?: unknown;
  cause?: unknown;
}

export class RmqsError extends Error {
  constructor(message: string, options?: RmqsErrorOptions);
  /** The HTTP status; 0 when there was no answer. */
  status: number;
  /** An ErrorCode, or the client's own: 'timeout', 'aborted', 'connection'. */
  code: ErrorCode | 'timeout' | 'aborted' | 'connection' | 'unknown' | string;
  /** The request member at fault (for a schedule() caller: the member of its own job). */
  field?: string;
  /** A batch's 400: each invalid item (index in the batch sent, or in scheduleMany's array). */
  errors?: BatchItemError[];
  /** From a Retry-After header. */
  retryAfterMs?: number;
  /** scheduleMany(): what the chunks before the refused one stored. */
  scheduled?: JobMinimal[] | Job[];
  /** The answer's body (not enumerable). */
  readonly body?: unknown;
}

export class InvalidArgumentError extends RmqsError {}
export class UnauthorizedError extends RmqsError {}
export class ForbiddenError extends RmqsError {}
export class UiReadOnlyError extends RmqsError {}
export class CrossOriginError extends RmqsError {}
export class HostNotAllowedError extends RmqsError {}
export class NotFoundError extends RmqsError {}
export class MethodNotAllowedError extends RmqsError {}
export class ConflictError extends RmqsError {}
export class PayloadTooLargeError extends RmqsError {}
export class UnsupportedMediaTypeError extends RmqsError {}
export class UnavailableError extends RmqsError {}
export class StorageFullError extends RmqsError {}
export class SearchTimeoutError extends RmqsError {}
export class InternalError extends RmqsError {}
export class TimeoutError extends RmqsError {}
export class AbortError extends RmqsError {}
export class ConnectionError extends RmqsError {}

export const errorClasses: Readonly<Record<ErrorCode, typeof RmqsError>>;
