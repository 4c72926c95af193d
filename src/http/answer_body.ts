/**
 * The body of an answer built while its transaction runs (src/query/run.ts): held while it fits
 * {@link ANSWER_BUFFER}, then streamed to the client with back-pressure.
 *
 * @module
 */
import type { AnswerSink } from "../query/context.ts";

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
  return out;
}

/**
 * The bytes of an answer as they are produced: held while they fit {@link ANSWER_BUFFER}, then
 * streamed to the client with backpressure ({@link flush} resolves once the client took enough).
 */
export class StreamingAnswer implements AnswerSink {
  #parts: Uint8Array[] = [];
  #size = 0;
  #writer: WritableStreamDefaultWriter<Uint8Array> | null = null;
  /** The last write to the client (its failure: the client is gone). */
  #last: Promise<void> = Promise.resolve();

  /** `stream` is called once, with the body, when the answer outgrows the buffer. */
  constructor(readonly stream: (body: ReadableStream<Uint8Array>) => void) {}

  /** Whether bytes were handed to the client already (the status is then sent). */
  get streaming(): boolean {
    return this.#writer !== null;
  }

  /** Appends bytes (never written to afterwards). */
  push(b: Uint8Array): void {
    this.#parts.push(b);
    this.#size += b.length;
  }

  /** Streams what is held once there is enough of it; resolves when the client can take more. */
  flush(): Promise<void> | undefined {
    if (this.#writer ? this.#size < CHUNK / 2 : this.#size <= ANSWER_BUFFER) return undefined;
    if (!this.#writer) {
      const ts = new TransformStream<Uint8Array, Uint8Array>(undefined, { highWaterMark: 4 }, {
        highWaterMark: 4,
      });
      this.#writer = ts.writable.getWriter();
      this.stream(ts.readable);
    }
    return this.#send();
  }

  /** Resolves when every byte handed to the client was taken; rejects when the client is gone. */
  settled(): Promise<void> {
    return this.#last;
  }

  /** The whole answer, when it never outgrew the buffer. */
  bytes(): Uint8Array {
    return concat(this.#parts, this.#size);
  }

  /** Sends what is left and ends the stream. */
  async end(): Promise<void> {
    await this.#send();
    await this.#writer!.close();
  }

  /** Ends the stream with an error: the client sees a truncated answer. */
  abort(e: unknown): void {
    this.#writer?.abort(e).catch(() => {});
  }

  #send(): Promise<void> {
    const chunk = concat(this.#parts, this.#size);
    this.#parts = [];
    this.#size = 0;
    const sent = this.#writer!.write(chunk);
    this.#last = sent;
    sent.catch(() => {}); // reported through `settled` or the next write
    return sent;
  }
}
