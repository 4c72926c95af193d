/**
 * The body of a plain read (src/query/run.ts): its rows, JSON texts in their first column, as
 * one JSON array. The rows' bytes are copied from the connection's receive buffer into the array
 * ({@link JsonArraySink}, a row sink of src/pg/), never becoming JS strings; small answers are
 * carved from shared slabs. The read runs as the request's role through src/db/run_as.ts: a small
 * read in one round trip, or a cursor read whose answer streams with back-pressure.
 *
 * @module
 */
import type { Result, RowSink, Statement } from "../pg/connection.ts";
import type { ReadRecord } from "../query/context.ts";
import type { Database } from "../db/pool.ts";
import {
  type EndOptions,
  FETCH_BATCH,
  FETCH_BYTES,
  type OpenTx,
  PRELUDE,
  runAs,
} from "../db/run_as.ts";
import { PgFetchTooLargeError } from "../pg/errors.ts";
import { cursorAnswer } from "./cursor_answer.ts";
import type { RequestRole } from "../auth/roles.ts";

const OPEN = 0x5b; // [
const COMMA = 0x2c; // ,
const CLOSE = 0x5d; // ]
const NULL = new TextEncoder().encode("null");

/**
 * Answers are carved from 8 KiB slabs, as Node's Buffer pool does: an ArrayBuffer costs 1–2 µs
 * in Deno whatever its size. An answer is never written to once handed out.
 */
const SLAB = 8192;
let slab = new Uint8Array(0);
let slabAt = 0;

/** A byte array of `n` bytes, small ones carved from a shared slab. */
export function alloc(n: number): Uint8Array {
  if (n > SLAB / 4) return new Uint8Array(n);
  if (slab.length - slabAt < n) {
    slab = new Uint8Array(SLAB);
    slabAt = 0;
  }
  // A view made with the constructor: cheaper than `subarray` (no species lookup).
  const out = new Uint8Array(slab.buffer, slabAt, n);
  slabAt += n;
  return out;
}

/**
 * Whole answers up to this many bytes are answered as text (see {@link JsonArraySink.whole}).
 * PostgreSQL sends valid UTF-8 (the connection's client encoding), so the text is exactly its bytes.
 */
const TEXT_MAX = 16384;
const utf8 = new TextDecoder();

/** Scratch buffers reused between answers (at most a few: one per answer being built). */
const scratch: Uint8Array[] = [];
const SCRATCH = 16384;
/** The largest first buffer an expected size gets (beyond it, the buffer grows as it fills). */
const EXPECTED_MAX = 1 << 20;
/**
 * Buffers larger than the scratch size kept for the next answers: at most {@link SPARE_MAX}, each
 * at most {@link EXPECTED_MAX} bytes — those a sink grew out of, those released, and those of
 * whole answers given back once their response copied them ({@link recycleAnswer}). A new buffer
 * costs its zeroing and, being external memory, brings the garbage collector sooner; a 68 KB
 * answer grown 16 → 32 → 64 → 128 KiB left three array buffers per request that, with 50 requests
 * in flight, outlived the young generation and were freed only at the next full collection
 * (docs/performance.md, "Memory").
 */
const spare: Uint8Array[] = [];
const SPARE_MAX = 8;
/** Buffers of whole answers a sink handed over and that may be given back once. */
const handedOver = new WeakSet<ArrayBufferLike>();

/** A spare buffer of at least `n` bytes, if one is kept. */
function pooled(n: number): Uint8Array | undefined {
  for (let i = spare.length - 1; i >= 0; i--) {
    const b = spare[i];
    if (b.length >= n) {
      spare[i] = spare[spare.length - 1];
      spare.pop();
      return b;
    }
  }
  return undefined;
}

/** A buffer of at least `n` bytes: a spare one if one is large enough, else a new one. */
function sized(n: number): Uint8Array {
  return pooled(n) ?? new Uint8Array(n);
}

/** Keeps a buffer no longer used by its sink for the next answers (or leaves it to the GC). */
function recycle(b: Uint8Array): void {
  if (b.length === SCRATCH) {
    if (scratch.length < 64) scratch.push(b);
  } else if (b.length > SCRATCH && b.length <= EXPECTED_MAX && spare.length < SPARE_MAX) {
    spare.push(b);
  }
}

/**
 * Gives back the buffer of a whole answer of {@link readJson} once nothing refers to its bytes any
 * more: `new Response(bytes)` copies them (src/http/server.ts calls this right after). Bytes of
 * any other origin, or given back before, are left alone.
 */
export function recycleAnswer(bytes: Uint8Array): void {
  const buf = bytes.buffer;
  if (handedOver.delete(buf)) recycle(new Uint8Array(buf));
}

/** What a released sink holds (making a new empty array would cost an ArrayBuffer). */
const RELEASED = new Uint8Array(0);

/**
 * Collects JSON rows (first column) into a JSON array: `[row,row,…]`. {@link take} returns the
 * array built so far and starts the next part (for streaming: every part after the first starts
 * with a comma, the last one ends the array).
 */
export class JsonArraySink implements RowSink {
  #buf: Uint8Array;
  #n = 0;
  /** Rows taken so far. */
  rows = 0;
  /** Rows larger than this are refused by the client (src/pg/connection.ts); Infinity: none. */
  maxRowBytes: number;
  /** What one fetch may bring (RowSink.maxFetchBytes, src/pg/connection.ts); Infinity: no limit. */
  maxFetchBytes: number;
  /** The largest row taken, in bytes (for the next fetch's size, src/db/run_as.ts nextFetch). */
  maxRow = 0;

  /**
   * An empty collector; `expected`: the answer's likely size in bytes (the last answer of the same
   * read), so that a larger answer is built in one buffer of about its size instead of growing;
   * `maxRowBytes`, `maxFetchBytes`: see {@link maxRowBytes}, {@link maxFetchBytes}.
   */
  constructor(expected = 0, maxRowBytes = Infinity, maxFetchBytes = FETCH_BYTES) {
    this.maxRowBytes = maxRowBytes;
    this.maxFetchBytes = maxFetchBytes;
    this.#buf = expected + 2 > SCRATCH
      ? sized(Math.min(expected + (expected >> 4) + 64, EXPECTED_MAX))
      : scratch.pop() ?? new Uint8Array(SCRATCH);
  }

  /** Bytes collected in the current part. */
  get size(): number {
    return this.#n;
  }

  /** Appends one row (SQL NULL becomes `null`). */
  row(buf: Uint8Array, start: number, end: number): void {
    const len = end < start ? 4 : end - start;
    if (len > this.maxRow) this.maxRow = len;
    if (this.#n + len + 2 > this.#buf.length) this.#grow(len + 2);
    const out = this.#buf;
    out[this.#n++] = this.rows++ === 0 ? OPEN : COMMA;
    if (end < start) out.set(NULL, this.#n);
    else out.set(buf.subarray(start, end), this.#n);
    this.#n += len;
  }

  #grow(more: number): void {
    let size = this.#buf.length * 2;
    while (size < this.#n + more) size *= 2;
    const next = pooled(this.#n + more) ?? new Uint8Array(size);
    next.set(this.#buf.subarray(0, this.#n));
    // The old buffer was never handed out (take() replaces a buffer it hands out).
    recycle(this.#buf);
    this.#buf = next;
  }

  /**
   * The bytes collected since the last take (`last`: closing the array, `[]` when no row came),
   * as an array of its own.
   */
  take(last: boolean): Uint8Array {
    const n = this.#end(last);
    if (this.#buf.length === SCRATCH) {
      const out = alloc(n);
      out.set(this.#buf.subarray(0, n));
      return out;
    }
    // A grown buffer (an answer over the scratch size) is handed over as it is, not copied: it is
    // at least half full (it doubled only when needed). The next part gets one of the same size.
    const out = this.#buf.subarray(0, n);
    if (last) handedOver.add(this.#buf.buffer);
    this.#buf = last ? RELEASED : sized(this.#buf.length);
    return out;
  }

  /**
   * The whole answer (closing the array): text when small ({@link TEXT_MAX}), else bytes. A
   * response body given as bytes is copied into an array buffer of its own by `new Response`
   * (measured: an ArrayBuffer costs more than decoding a small answer), text is not.
   */
  whole(): Uint8Array | string {
    // A larger answer is handed over in its buffer, given back once its response copied it.
    if (this.#n + 2 > TEXT_MAX) return this.take(true);
    const n = this.#end(true);
    return utf8.decode(this.#buf.subarray(0, n));
  }

  /** Closes the part (see {@link take}) and starts the next one; returns its length. */
  #end(last: boolean): number {
    if (this.#n + 2 > this.#buf.length) this.#grow(2);
    let n = this.#n;
    if (last) {
      if (this.rows === 0) {
        this.#buf[n++] = OPEN;
        this.rows = -1; // never opened again
      }
      this.#buf[n++] = CLOSE;
    }
    this.#n = 0;
    return n;
  }

  /** Gives its buffer back for reuse (the sink must not be used afterwards). */
  release(): void {
    recycle(this.#buf);
    this.#buf = RELEASED;
  }
}

const SMALL_READ: EndOptions = { end: "commit", oneBatch: true, implicit: true };
const LARGE_READ: EndOptions = { end: "commit", oneBatch: true };

/**
 * A one-batch read whose last answer had at least this many bytes runs between `begin` and
 * `commit` sent in its batch instead of as the batch's implicit transaction. PostgreSQL ends an
 * implicit transaction's portal at the Sync, in the commit, just after the message loop reset its
 * message memory: the executor's memory freed there (sorts of `json_agg … ORDER BY`, bitmaps,
 * the rows built) lies at the top of the C heap, glibc gives it back to the kernel, and the next
 * execution takes it again (measured on the 3-level nested read: ≈ 4 `brk` calls per execution
 * and their page faults, ≈ 5–10% of the backend's CPU). After an explicit `begin`, the portal is
 * ended by the `commit`'s own Bind, under what that message allocated, and nothing is given back.
 * Two statements more cost a few µs, little beside such a read; a smaller read (a primary-key
 * read) stays implicit.
 */
export const EXPLICIT_MIN = 16 * 1024;

/**
 * Runs a read whose rows are JSON texts (first column) and answers a JSON array; the rows' bytes
 * go from the connection's receive buffer into the answer, never becoming strings.
 * - Known to fit one batch (`opts.small`): role switch and query in one batch (no begin or commit:
 *   PostgreSQL runs a batch up to its Sync as one transaction; begin and commit in the batch when
 *   its last answer was large, {@link EXPLICIT_MIN}), one round trip.
 * - Whose last answer fitted one batch (`opts.seen`, the read's record, kept with the compiled
 *   read): the same, asking for at most `batch` rows. When more rows come, the batch's
 *   transaction has ended with the portal, so the read runs again as a cursor read (below): the
 *   rows of the first try were not sent, and the answer comes from one snapshot.
 * - Otherwise: begin, role switch and the query's first `batch` rows (a portal with a row limit)
 *   in one batch, one round trip. A first part that completes the query is returned at once and
 *   the commit follows off the response's critical path. Otherwise the answer is a stream that
 *   asks the portal for the next `batch` rows only when the client has taken the earlier ones
 *   (back-pressure), so memory stays flat.
 * Each run updates `opts.seen`. Errors before the first row reject, so the caller can still
 * answer with an error status. `opts.maxRowBytes`: a larger row fails the read (a
 * PgRowTooLargeError) without being buffered.
 */
export function readJson(
  db: Database,
  who: RequestRole,
  sql: string,
  params: unknown[],
  opts: { small?: boolean; batch?: number; maxRowBytes?: number; seen?: ReadRecord } = {},
): Promise<Uint8Array | string | ReadableStream<Uint8Array>> {
  const batch = opts.batch ?? FETCH_BATCH;
  // A read without a record calls a VOLATILE function: its one-batch try commits at its Sync, so
  // it is never run again, and its rows are not bounded per fetch there.
  const rerunnable = opts.seen !== undefined;
  const seen = opts.seen ?? {};
  if (!opts.small && !seen.fitted) {
    return cursorRead(db, who, sql, params, batch, opts.maxRowBytes, seen, seen.bytes);
  }
  // Not an async function: the one-batch read's answer is made in a handler of runAs's promise,
  // no suspended frame of its own kept alive across the round trip.
  const sink = new JsonArraySink(
    seen.bytes,
    opts.maxRowBytes,
    rerunnable ? FETCH_BYTES : Infinity,
  );
  const stmt: Statement = opts.small
    ? { sql, params, sink }
    : { sql, params, sink, maxRows: batch };
  const explicit = (seen.bytes ?? 0) >= EXPLICIT_MIN;
  return runAs(db, who, [stmt], explicit ? LARGE_READ : SMALL_READ).then((results) => {
    // Results: the role switch's, then the read's (after begin's, when explicit).
    if (!results[explicit ? PRELUDE : 1].suspended) {
      seen.bytes = sink.size;
      const out = sink.whole();
      sink.release();
      return out;
    }
    sink.release();
    seen.fitted = false;
    seen.bytes = undefined;
    return cursorRead(db, who, sql, params, batch, opts.maxRowBytes, seen, 0);
  }, (e) => {
    sink.release();
    // Rows too large to hold this many at a time: read as a cursor, as many rows per fetch as
    // fitted (nothing of the first try was sent; read-only, so running it again changes nothing).
    if (!(e instanceof PgFetchTooLargeError)) throw e;
    seen.fitted = false;
    seen.bytes = undefined;
    return cursorRead(db, who, sql, params, batch, opts.maxRowBytes, seen, 0, e.rows);
  });
}

/**
 * A cursor read ({@link readJson}); `expected`: the answer's likely size in bytes; `first`: rows
 * of its first fetch (default `batch`). A first fetch whose rows would pass FETCH_BYTES
 * (src/db/run_as.ts) is rolled back and run again asking for the rows that fitted.
 */
async function cursorRead(
  db: Database,
  who: RequestRole,
  sql: string,
  params: unknown[],
  batch: number,
  maxRowBytes: number | undefined,
  seen: ReadRecord,
  expected: number | undefined,
  first = batch,
): Promise<Uint8Array | string | ReadableStream<Uint8Array>> {
  const sink = new JsonArraySink(expected, maxRowBytes);
  try {
    return await runAs(db, who, [{ sql, params, sink, maxRows: first }], {
      end: "open",
      body: (open) => cursor(open, sink, batch, seen, who.requestId),
    });
  } catch (e) {
    sink.release();
    if (e instanceof PgFetchTooLargeError && e.rows < first) {
      return cursorRead(db, who, sql, params, batch, maxRowBytes, seen, 0, e.rows);
    }
    throw e;
  }
}

/**
 * The answer of a cursor read whose first rows were asked for: whole when they completed it,
 * else a stream fetching `batch` more rows each time the client took the earlier ones
 * (src/http/cursor_answer.ts).
 */
async function cursor(
  open: OpenTx,
  sink: JsonArraySink,
  batch: number,
  seen: ReadRecord,
  requestId: string | undefined,
): Promise<Uint8Array | string | ReadableStream<Uint8Array>> {
  let ended = false;
  let streaming = false;
  /** Ends the transaction (commit when `ok`) and gives the connection back. */
  const finish = (ok: boolean) => {
    if (ended) return;
    ended = true;
    // A streamed answer's sink may still be written by a fetch in flight: left to the GC.
    if (!streaming) sink.release();
    open.end(ok);
  };
  let first: Result;
  try {
    first = (await open.started)[PRELUDE];
    open.touch();
  } catch (e) {
    finish(false);
    throw e;
  }
  seen.fitted = !first.suspended;
  if (!first.suspended) {
    seen.bytes = sink.size;
    const out = sink.whole();
    finish(true);
    return out;
  }
  const head = sink.take(false);
  streaming = true;
  return cursorAnswer(open, sink, batch, head, finish, requestId);
}
