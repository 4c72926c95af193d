/**
 * What the query stage works with per request (src/query/run.ts): the configuration, the pool,
 * the live state and the request's role, and the shape of an answer's body.
 *
 * @module
 */
import type { Config } from "../config/load.ts";
import type { Database } from "../db/pool.ts";
import type { RequestRole } from "../auth/roles.ts";
import type { AppState } from "../state/runtime.ts";

/** The body of an answer: whole bytes or text, or a stream. */
export type Body = Uint8Array | string | ReadableStream<Uint8Array>;

/**
 * Where an answer's bytes go while its transaction runs (the HTTP layer's response body,
 * src/http/answer_body.ts): held while small, streamed with back-pressure once large.
 */
export interface AnswerSink {
  /** Whether bytes were handed to the client already (the status is then sent). */
  readonly streaming: boolean;
  /** Appends bytes (never written to afterwards). */
  push(b: Uint8Array): void;
  /** Streams what is held once there is enough of it; resolves when the client can take more. */
  flush(): Promise<void> | undefined;
  /** Resolves when every byte handed to the client was taken; rejects when the client is gone. */
  settled(): Promise<void>;
  /** The whole answer, when it never outgrew the buffer. */
  bytes(): Uint8Array;
  /** Sends what is left and ends the stream. */
  end(): Promise<void>;
  /** Ends the stream with an error: the client sees a truncated answer. */
  abort(e: unknown): void;
  /**
   * Tells `watcher` (the request's transaction) when flush or settled wait for the client and when
   * they no longer do: a client too slow while the pool needs the connection gets the rest of its
   * answer read ahead, or the answer is ended (src/http/read_ahead.ts).
   */
  watchBy(watcher: ClientWatcher, requestId?: string): void;
}

/** What is told when an answer waits for its client (src/db/pool.ts Lease.waitClient). */
export interface ClientWatcher {
  /** The answer waits for its client; `onStall` lets go of the connection when called. */
  waitClient(onStall: () => void): void;
  /** It no longer waits. */
  clientTook(): void;
}

/** What the query stage needs per request. */
export interface QueryContext {
  cfg: Config;
  db: Database;
  state: AppState;
  who: RequestRole;
  /**
   * Where a read may run (a read replica, or the primary: src/db/replicas.ts), called once per
   * read that runs; absent without read replicas (reads run on `db`).
   */
  read?: () => Database;
  /** A sink for an answer built in a transaction; `stream` gets its body once it streams. */
  sink: (stream: (body: ReadableStream<Uint8Array>) => void) => AnswerSink;
  /**
   * Runs a plain read whose rows are JSON texts as `who` and answers them as one JSON array,
   * whole or streamed (the HTTP layer's body, src/http/json_body.ts). `maxRowBytes`: rows larger
   * are refused by svc's client as they arrive (a PgRowTooLargeError), never buffered.
   */
  readJson: (
    db: Database,
    who: RequestRole,
    sql: string,
    params: unknown[],
    opts: { small?: boolean; maxRowBytes?: number; seen?: ReadRecord },
  ) => Promise<Body>;
}

/**
 * What the last run of a cached read answered, kept with the compiled read (src/query/cache.ts)
 * and updated by the read itself (src/http/json_body.ts): whether the answer came whole in the
 * first fetch batch, and its size in bytes. A read whose last answer fitted one batch runs as one
 * (one round trip, no `begin` and `commit`), and its answer's buffer starts at the last size.
 */
export interface ReadRecord {
  /** The last answer came whole in the first fetch batch. */
  fitted?: boolean;
  /** The last answer's size in bytes. */
  bytes?: number;
}
