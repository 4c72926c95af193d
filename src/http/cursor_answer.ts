/**
 * The streamed answer of a cursor read (src/http/json_body.ts): the rows of each fetch go to the
 * client in pieces, and the next fetch is sent once the client took the pieces before (back-
 * pressure: one fetch's rows in memory at a time). The pool sees when the answer waits for its
 * client (src/db/pool.ts Lease.waitClient); a client too slow while other requests wait for a
 * connection gets the rest of its answer read ahead within the read-ahead budget, and the
 * connection goes back to the pool, or the answer is ended (src/http/read_ahead.ts).
 *
 * @module
 */
import type { Result, RowSink } from "../pg/connection.ts";
import { FETCH_BYTES, nextFetch, type OpenTx } from "../db/run_as.ts";
import { PgFetchTooLargeError } from "../pg/errors.ts";
import { readAhead, ReadAheadHold } from "./read_ahead.ts";

/**
 * Pieces handed to the client are at most this large (views of a fetch's bytes, not copies): the
 * client's progress is seen per piece, so a slow but reading client is told from a stalled one.
 */
const PIECE = 256 * 1024;

/** What a cursor answer needs of its rows' collector (src/http/json_body.ts JsonArraySink). */
export interface CursorSink extends RowSink {
  /** The largest row taken, in bytes. */
  readonly maxRow: number;
  /** What one fetch may bring, in bytes (RowSink.maxFetchBytes). */
  maxFetchBytes: number;
  /** The bytes collected since the last take (`last`: closing the array). */
  take(last: boolean): Uint8Array;
}

/**
 * The body of a cursor read whose first fetch (`head`) did not end it: `batch` rows more per
 * fetch (fewer for large rows, src/db/run_as.ts nextFetch). `finish` ends the transaction (commit
 * when `ok`) and gives the connection back; it is called once.
 */
export function cursorAnswer(
  open: OpenTx,
  sink: CursorSink,
  batch: number,
  head: Uint8Array,
  finish: (ok: boolean) => void,
  requestId: string | undefined,
): ReadableStream<Uint8Array> {
  return new CursorAnswer(open, sink, batch, head, finish, requestId).body;
}

class CursorAnswer {
  readonly body: ReadableStream<Uint8Array>;
  /** Pieces not yet handed to the client. */
  #queue: Uint8Array[] = [];
  /** The portal is exhausted (the transaction was ended). */
  #done = false;
  /** `finish` was called. */
  #over = false;
  /** The stream was closed, errored or cancelled. */
  #closed = false;
  #filling: Promise<void> | null = null;
  #controller!: ReadableStreamDefaultController<Uint8Array>;
  /** The queued pieces' bytes held once the answer is read ahead of its client. */
  #ahead: ReadAheadHold | null = null;
  readonly #stall = () => this.#readAheadNow();

  constructor(
    readonly open: OpenTx,
    readonly sink: CursorSink,
    readonly batch: number,
    head: Uint8Array,
    readonly finish: (ok: boolean) => void,
    readonly requestId: string | undefined,
  ) {
    this.#split(head);
    this.body = new ReadableStream<Uint8Array>({
      start: (c) => {
        this.#controller = c;
      },
      pull: () => this.#pull(),
      cancel: () => {
        // The client went away: the open portal and transaction are rolled back.
        this.#closed = true;
        this.#queue = [];
        this.#ahead?.release();
        this.#end(false);
      },
    }, { highWaterMark: 1 });
  }

  /** The reader took the piece before (or this is the first ask): hands it the next one. */
  async #pull(): Promise<void> {
    if (this.#closed) return;
    if (!this.#ahead && !this.#over) this.open.clientTook();
    try {
      while (this.#queue.length === 0 && !this.#done) {
        await (this.#filling ??= this.#fill());
        if (this.#closed) return;
      }
    } catch (e) {
      return this.#fail(e);
    }
    if (this.#closed) return;
    const piece = this.#queue.shift();
    if (piece === undefined) { // nothing was left (never so: the last part closes the array)
      this.#closed = true;
      this.#ahead?.release();
      return this.#controller.close();
    }
    this.#ahead?.took(piece.length);
    this.#controller.enqueue(piece);
    if (this.#queue.length === 0 && this.#done) {
      this.#closed = true;
      this.#ahead?.release();
      this.#controller.close();
    } else if (!this.#over) {
      this.open.waitClient(this.#stall);
    }
  }

  /** Fetches the next rows into the queue; the last ones end the transaction. */
  async #fill(): Promise<void> {
    try {
      let budget = 0;
      if (this.#ahead) {
        budget = readAhead.take(FETCH_BYTES);
        if (budget === 0) throw this.#ahead.ended("the read-ahead budget is spent");
        this.sink.maxFetchBytes = budget;
      }
      let more: Result;
      try {
        more = await this.open.fetch("", nextFetch(this.sink.maxRow, this.batch), this.sink);
      } catch (e) {
        if (budget && e instanceof PgFetchTooLargeError) {
          throw this.#ahead!.ended("the rest of the answer does not fit the read-ahead budget");
        }
        throw e;
      } finally {
        readAhead.give(budget);
      }
      if (this.#closed) return; // cancelled meanwhile
      this.#done = !more.suspended;
      const part = this.sink.take(this.#done);
      this.#ahead?.force(part.length); // a fetch's first row may pass what was taken for it
      this.#split(part);
      if (this.#done) this.#end(true);
    } finally {
      this.#filling = null;
    }
  }

  /** The pool needs the connection and the client is slow: reads the rest ahead, or ends. */
  #readAheadNow(): void {
    if (this.#closed || this.#ahead || this.#over) return;
    const ahead = this.#ahead = new ReadAheadHold(this.requestId, (e) => this.#fail(e));
    let queued = 0;
    for (const p of this.#queue) queued += p.length;
    if (!ahead.start(queued)) {
      return this.#fail(ahead.ended("its client is slow and the read-ahead budget is spent"));
    }
    void this.#drain();
  }

  async #drain(): Promise<void> {
    try {
      while (!this.#done && !this.#closed) await (this.#filling ??= this.#fill());
    } catch (e) {
      this.#fail(e);
    }
  }

  /** Ends the answer with `e` (the client sees it truncated) and the transaction, if open. */
  #fail(e: unknown): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#queue = [];
    this.#ahead?.release();
    this.#end(false);
    this.#controller.error(e);
  }

  #end(ok: boolean): void {
    if (this.#over) return;
    this.#over = true;
    this.finish(ok);
  }

  /** Queues `bytes` as pieces of at most {@link PIECE}. */
  #split(bytes: Uint8Array): void {
    const n = bytes.length;
    if (n <= PIECE) {
      if (n) this.#queue.push(bytes);
      return;
    }
    for (let at = 0; at < n; at += PIECE) this.#queue.push(bytes.subarray(at, at + PIECE));
  }
}
