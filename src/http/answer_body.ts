/**
 * The body of an answer built while its transaction runs (src/query/run.ts): held while it fits
 * {@link ANSWER_BUFFER}, then streamed to the client with back-pressure.
 *
 * @module
 */
import type { AnswerSink, ClientWatcher } from "../query/context.ts";
import { isSole, markSole, release } from "../util/handoff.ts";
import { ReadAheadHold } from "./read_ahead.ts";

/**
 * Bytes of an answer built by the query stage that are held before it is streamed: an answer that
 * ends within them goes out in one piece, with the status of its outcome.
 */
export const ANSWER_BUFFER = 1024 * 1024;

/**
 * Streamed chunks are about this large: small pieces are joined first, a piece of at least half
 * of it (a cursor read's slab of rows, src/db/run_as.ts) goes out as it is, without a copy.
 */
const CHUNK = 256 * 1024;

function concat(parts: Uint8Array[], n: number): Uint8Array {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  // A copy made here, shared with nothing: the only view of its buffer (src/util/handoff.ts).
  return markSole(out);
}

/** Chunks made and not yet read by the client beyond which {@link StreamingAnswer.flush} waits. */
const QUEUED = 2;

/** The answers whose body the runtime's HTTP response reads ({@link servedByRuntime}). */
const answers = new WeakMap<ReadableStream<Uint8Array>, StreamingAnswer>();

/**
 * Declares that Deno's HTTP response reads `body` (called by the server when it answers with it):
 * a chunk it read is then held by the runtime, and the answer's own reference is dropped at the
 * next read (src/util/handoff.ts). Any other reader keeps the chunks it read: never declared.
 */
export function servedByRuntime(body: ReadableStream<Uint8Array>): void {
  const a = answers.get(body);
  if (a) a.served = true;
}

/**
 * The bytes of an answer as they are produced: held while they fit {@link ANSWER_BUFFER}, then
 * streamed to the client with backpressure ({@link flush} resolves once the client took enough).
 *
 * The body is a pull stream: a chunk is given to the reader when it asks for one, and the next
 * ask means the reader is done with the chunk before. Deno's response body takes a chunk's memory
 * as it reads it (no copy) and holds it until the socket took it; when the server declared that
 * reader ({@link servedByRuntime}), the answer then detaches the chunks nothing else reads
 * (src/util/handoff.ts), so their memory is freed as soon as they are sent, not at a later garbage
 * collection.
 */
export class StreamingAnswer implements AnswerSink {
  #parts: Uint8Array[] = [];
  #size = 0;
  #controller: ReadableStreamDefaultController<Uint8Array> | null = null;
  /** Chunks made and not yet read. */
  #queue: Uint8Array[] = [];
  /** A read waits for a chunk. */
  #asked = false;
  /** The chunk read last, to let go of at the next ask (one read, one chunk). */
  #taken: Uint8Array | null = null;
  /** Waits for the queue to shrink: `flush` (to {@link QUEUED}) or `settled` (to empty). */
  #waits: { below: number; done: PromiseWithResolvers<void> }[] = [];
  /** Why the client stopped reading (it cancelled the body), once it did. */
  #gone: { reason: unknown } | null = null;
  #ending: PromiseWithResolvers<void> | null = null;
  #closed = false;
  /** Whether Deno's HTTP response reads the body ({@link servedByRuntime}). */
  served = false;
  /** Told when the answer waits for its client and when it no longer does ({@link watchBy}). */
  #watcher: ClientWatcher | null = null;
  #requestId: string | undefined;
  /** Lets go of the connection: made at the first wait for the client ({@link watchBy}). */
  #stall: (() => void) | null = null;
  /** The queued chunks' bytes held once the answer is read ahead of its client. */
  #ahead: ReadAheadHold | null = null;

  /** `stream` is called once, with the body, when the answer outgrows the buffer. */
  constructor(readonly stream: (body: ReadableStream<Uint8Array>) => void) {}

  /** Whether bytes were handed to the client already (the status is then sent). */
  get streaming(): boolean {
    return this.#controller !== null;
  }

  /** Appends bytes (never written to afterwards). */
  push(b: Uint8Array): void {
    this.#parts.push(b);
    this.#size += b.length;
  }

  /** Streams what is held once there is enough of it; resolves when the client can take more. */
  flush(): Promise<void> | undefined {
    if (this.#controller ? this.#size < CHUNK / 2 : this.#size <= ANSWER_BUFFER) return undefined;
    if (!this.#controller) this.#open();
    this.#send();
    return this.#waitBelow(QUEUED);
  }

  /** Resolves when every byte handed to the client was taken; rejects when the client is gone. */
  settled(): Promise<void> {
    return this.#waitBelow(1) ?? Promise.resolve();
  }

  /** The whole answer, when it never outgrew the buffer. */
  bytes(): Uint8Array {
    return concat(this.#parts, this.#size);
  }

  /** Sends what is left and ends the stream. */
  end(): Promise<void> {
    if (this.#gone) return Promise.reject(this.#gone.reason);
    if (this.#size) this.#send();
    this.#ending = Promise.withResolvers<void>();
    this.#closeIfDone();
    return this.#ending.promise;
  }

  /** Ends the stream with an error: the client sees a truncated answer. */
  abort(e: unknown): void {
    this.#queue = [];
    this.#ahead?.release();
    if (!this.#closed && !this.#gone) {
      this.#closed = true;
      this.#controller?.error(e);
    }
    // What the producer does next fails (nothing more is committed for a client cut off).
    this.#gone ??= { reason: e };
    this.#fail(e);
  }

  /**
   * Tells `watcher` (the request's transaction: src/db/pool.ts Lease.waitClient) when the
   * producer waits for the client and when it no longer does; when the pool needs the connection
   * meanwhile, the answer is read ahead ({@link readAhead}).
   */
  watchBy(watcher: ClientWatcher, requestId?: string): void {
    this.#watcher = watcher;
    this.#requestId = requestId;
  }

  /**
   * The client is too slow for a busy pool: from now on the producer no longer waits for it; the
   * chunks it makes are held within the read-ahead budget (src/http/read_ahead.ts), or the answer
   * is ended when they do not fit.
   */
  #readAhead(): void {
    if (this.#ahead || this.#closed || this.#gone) return;
    const ahead = this.#ahead = new ReadAheadHold(this.#requestId, (e) => {
      if (!this.#closed && !this.#gone) this.abort(e);
    });
    let queued = 0;
    for (const c of this.#queue) queued += c.length;
    if (!ahead.start(queued)) return this.#tooSlow(ahead);
    const waits = this.#waits;
    this.#waits = [];
    for (const w of waits) w.done.resolve();
  }

  /** Ends a read-ahead answer whose chunks do not fit the budget. */
  #tooSlow(ahead: ReadAheadHold): void {
    this.abort(ahead.ended("its client is too slow and the read-ahead budget is spent"));
  }

  #open(): void {
    const body = new ReadableStream<Uint8Array>({
      start: (c) => {
        this.#controller = c;
      },
      pull: () => this.#pull(),
      cancel: (reason) => {
        this.#gone = { reason: reason ?? new Error("the client went away") };
        this.#queue = [];
        this.#ahead?.release();
        this.#fail(this.#gone.reason);
      },
    }, { highWaterMark: 0 });
    answers.set(body, this);
    this.stream(body);
  }

  /** The reader asks for a chunk: it is done with the ones it read before. */
  #pull(): void {
    if (this.#taken) {
      release(this.#taken);
      this.#taken = null;
    }
    const next = this.#queue.shift();
    this.#ahead?.took(next?.length ?? 0);
    if (next === undefined) this.#asked = true;
    else this.#give(next);
  }

  #send(): void {
    const chunk = concat(this.#parts, this.#size);
    this.#parts = [];
    this.#size = 0;
    if (this.#gone || this.#closed) return;
    if (this.#asked) {
      this.#asked = false;
      this.#give(chunk);
    } else if (!this.#ahead) {
      this.#queue.push(chunk);
    } else if (this.#ahead.tryHold(chunk.length)) {
      this.#queue.push(chunk);
    } else {
      this.#tooSlow(this.#ahead);
    }
  }

  /** Hands `chunk` to the waiting read (which may ask again before this returns). */
  #give(chunk: Uint8Array): void {
    if (this.served && isSole(chunk)) this.#taken = chunk;
    this.#controller!.enqueue(chunk);
    this.#wake();
    this.#closeIfDone();
  }

  #closeIfDone(): void {
    if (!this.#ending || this.#closed || this.#queue.length) return;
    this.#closed = true;
    this.#ahead?.release();
    this.#controller!.close();
    this.#ending.resolve();
  }

  /** A promise resolved once fewer than `below` chunks wait to be read, or none when already. */
  #waitBelow(below: number): Promise<void> | undefined {
    if (this.#gone) return Promise.reject(this.#gone.reason);
    if (this.#queue.length < below || this.#ahead) return undefined;
    const done = Promise.withResolvers<void>();
    this.#waits.push({ below, done });
    if (this.#watcher) this.#watcher.waitClient(this.#stall ??= () => this.#readAhead());
    return done.promise;
  }

  #wake(): void {
    if (!this.#waits.length) return;
    const n = this.#queue.length;
    this.#waits = this.#waits.filter((w) => {
      if (n >= w.below) return true;
      w.done.resolve();
      return false;
    });
    if (!this.#waits.length) this.#watcher?.clientTook();
  }

  #fail(e: unknown): void {
    const waits = this.#waits;
    this.#waits = [];
    for (const w of waits) w.done.reject(e);
    this.#ending?.reject(e);
  }
}
