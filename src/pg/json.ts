/**
 * Row sinks that build answers from raw column bytes: rows whose first column is JSON text are
 * copied from the connection's receive buffer into a JSON array, never becoming JS strings.
 */
import type { RowSink } from "./connection.ts";

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

/** Scratch buffers reused between answers (at most a few: one per answer being built). */
const scratch: Uint8Array[] = [];
const SCRATCH = 16384;
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

  /** An empty collector. */
  constructor() {
    this.#buf = scratch.pop() ?? new Uint8Array(SCRATCH);
  }

  /** Appends one row (SQL NULL becomes `null`). */
  row(buf: Uint8Array, start: number, end: number): void {
    const len = end < start ? 4 : end - start;
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
    const next = new Uint8Array(size);
    next.set(this.#buf.subarray(0, this.#n));
    this.#buf = next;
  }

  /**
   * The bytes collected since the last take (`last`: closing the array, `[]` when no row came),
   * as an array of its own.
   */
  take(last: boolean): Uint8Array {
    if (this.#n + 2 > this.#buf.length) this.#grow(2);
    let n = this.#n;
    if (last) {
      if (this.rows === 0) {
        this.#buf[n++] = OPEN;
        this.rows = -1; // never opened again
      }
      this.#buf[n++] = CLOSE;
    }
    const out = alloc(n);
    out.set(this.#buf.subarray(0, n));
    this.#n = 0;
    return out;
  }

  /** Returns the scratch buffer for reuse (the sink must not be used afterwards). */
  release(): void {
    if (this.#buf.length === SCRATCH && scratch.length < 64) scratch.push(this.#buf);
    this.#buf = RELEASED;
  }
}
