/**
 * Admission of large request bodies (docs/http.md "Large bodies"): a POST /svc body is parsed,
 * planned and run whole, and a write's planning costs tens of times its body (a route's body and
 * its call parameter several times it; src/http/routes/handle.ts takes the same budget), so a worker handles
 * large bodies within a budget of bytes at once. A body of at least {@link LARGE_BODY} bytes is
 * admitted when the large bodies in progress and it fit the budget, or when no other large body is
 * in progress (so a body up to `http.max_body_size` always runs, alone); else it waits, in arrival
 * order, and is refused with 503 HTTP_BUSY (Retry-After) when its wait runs out or its client
 * leaves. Smaller bodies are never counted: a primary-key read pays nothing.
 *
 * @module
 */
import { SvcError } from "../svc_error.ts";
import { deadline } from "../util/deadline.ts";

/** Bodies of at least this many bytes are counted against the budget. */
export const LARGE_BODY = 64 * 1024;

/** A body waiting for room. */
interface Waiter {
  bytes: number;
  admit: () => void;
}

/**
 * The bytes a worker holds of request bodies still being received (streamed ones, over 16 KiB,
 * until read whole; docs/http.md "Large bodies"): before it, a thousand slow clients each sending
 * all but the last byte of a 10 MB body held 10 GB. A chunk that would take the total past the
 * budget is refused, 503 HTTP_BUSY, unless its body is the only one being received (a body up to
 * `http.max_body_size` can always arrive alone).
 */
export class ReceiveBudget {
  #held = 0;
  #bodies = 0;

  /** @param budget bytes of bodies being received at once; 0: no limit. */
  constructor(readonly budget: number) {}

  /** Bytes of bodies being received. */
  get held(): number {
    return this.#held;
  }

  /** One body starts arriving: count its chunks with `add`, and `end` it once (read or failed). */
  start(): { add(bytes: number): void; end(): void } {
    this.#bodies++;
    let mine = 0;
    let ended = false;
    return {
      add: (bytes: number) => {
        if (this.budget > 0 && this.#bodies > 1 && this.#held + bytes > this.budget) {
          throw new SvcError(
            "HTTP_BUSY",
            `the server is receiving too many large request bodies at once (http.receive_budget, ${this.budget} bytes); retry later`,
          );
        }
        this.#held += bytes;
        mine += bytes;
      },
      end: () => {
        if (ended) return;
        ended = true;
        this.#held -= mine;
        this.#bodies--;
      },
    };
  }
}

/** The budget of one worker (one server). */
export class BodyBudget {
  #held = 0;
  #running = 0;
  readonly #queue: Waiter[] = [];
  /** Bytes of the bodies waiting in the queue. */
  #queued = 0;

  /**
   * @param budget bytes of large bodies handled at once; 0: no limit.
   * @param receiving the bytes of bodies being received (see {@link ReceiveBudget}).
   */
  constructor(readonly budget: number, readonly receiving = new ReceiveBudget(0)) {}

  /** Bytes of large bodies in progress. */
  get held(): number {
    return this.#held;
  }

  /** Large bodies waiting for room. */
  get waiting(): number {
    return this.#queue.length;
  }

  #fits(bytes: number): boolean {
    return this.#running === 0 || this.#held + bytes <= this.budget;
  }

  #take(bytes: number): () => void {
    this.#held += bytes;
    this.#running++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.#held -= bytes;
      this.#running--;
      this.#wake();
    };
  }

  /** Admits waiters in arrival order while the first of them fits. */
  #wake(): void {
    while (this.#queue.length > 0 && this.#fits(this.#queue[0].bytes)) {
      this.#queue.shift()!.admit();
    }
  }

  /**
   * Runs `work` for a body of `bytes` bytes once the budget admits it (at once for a small body
   * or when it fits). Waits at most `waitMs` (and not past `signal`), else throws 503 HTTP_BUSY.
   */
  async run<T>(
    bytes: number,
    waitMs: number,
    signal: AbortSignal | null,
    work: () => Promise<T>,
  ): Promise<T> {
    if (bytes < LARGE_BODY || this.budget <= 0) return await work();
    const fits = this.#queue.length === 0 && this.#fits(bytes);
    // Bodies read whole and waiting are held in memory as arriving ones are: together they stay
    // within the receive budget (one may always wait).
    const cap = this.receiving.budget;
    if (!fits && cap > 0 && this.#queue.length > 0 && this.#queued + bytes > cap) {
      throw new SvcError(
        "HTTP_BUSY",
        `too many large request bodies are waiting (${this.#queued} bytes, ` +
          `http.receive_budget ${cap}); retry later`,
      );
    }
    const release = fits ? this.#take(bytes) : await this.#wait(bytes, waitMs, signal);
    try {
      return await work();
    } finally {
      release();
    }
  }

  #wait(bytes: number, waitMs: number, signal: AbortSignal | null): Promise<() => void> {
    return new Promise((resolve, reject) => {
      this.#queued += bytes;
      const waiter: Waiter = {
        bytes,
        admit: () => {
          this.#queued -= bytes;
          limit.clear();
          signal?.removeEventListener("abort", leave);
          resolve(this.#take(bytes));
        },
      };
      const give = (why: string) => {
        const i = this.#queue.indexOf(waiter);
        if (i < 0) return;
        this.#queue.splice(i, 1);
        this.#queued -= bytes;
        limit.clear();
        signal?.removeEventListener("abort", leave);
        // The next one may fit now that this one no longer waits ahead of it.
        this.#wake();
        reject(new SvcError("HTTP_BUSY", why));
      };
      const leave = () => give("the client left while its request body waited");
      const limit = deadline(
        waitMs,
        () =>
          give(
            `the server is busy with other large request bodies (${bytes} bytes waited ${
              Math.round(waitMs / 1000)
            } s); retry later`,
          ),
      );
      signal?.addEventListener("abort", leave, { once: true });
      this.#queue.push(waiter);
    });
  }
}
