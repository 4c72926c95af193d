/**
 * src/http/json_body.ts's JsonArraySink: rows of any size become one JSON array, whole or in
 * parts, and a part handed out never changes afterwards (big parts are handed over, not copied).
 */
import assert from "node:assert/strict";
import { JsonArraySink, recycleAnswer } from "../../src/http/json_body.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A JSON string row of about `n` bytes, inside a buffer with bytes around it. */
function row(i: number, n: number): { buf: Uint8Array; start: number; end: number } {
  const text = JSON.stringify({ i, pad: "x".repeat(n) });
  const buf = enc.encode(`##${text}##`);
  return { buf, start: 2, end: buf.length - 2 };
}

Deno.test("small and big answers are the rows as a JSON array", () => {
  for (const size of [0, 10, 3_000, 20_000, 70_000, 300_000]) {
    for (const count of [0, 1, 7]) {
      const sink = new JsonArraySink();
      const want: unknown[] = [];
      for (let i = 0; i < count; i++) {
        const r = row(i, size);
        sink.row(r.buf, r.start, r.end);
        want.push({ i, pad: "x".repeat(size) });
      }
      const out = sink.take(true);
      sink.release();
      assert.deepEqual(JSON.parse(dec.decode(out)), want, `${count} rows of ${size}`);
    }
  }
});

Deno.test("SQL NULL rows are null", () => {
  const sink = new JsonArraySink();
  sink.row(new Uint8Array(0), 0, -1);
  const r = row(1, 40_000);
  sink.row(r.buf, r.start, r.end);
  sink.row(new Uint8Array(0), 0, -1);
  const got = JSON.parse(dec.decode(sink.take(true)));
  sink.release();
  assert.equal(got.length, 3);
  assert.equal(got[0], null);
  assert.equal(got[2], null);
});

Deno.test("parts taken while streaming stay as they were when later rows arrive", () => {
  const sink = new JsonArraySink();
  const parts: Uint8Array[] = [];
  const snapshots: string[] = [];
  const want: unknown[] = [];
  let i = 0;
  for (const [rows, size] of [[3, 50_000], [2, 10], [4, 90_000], [1, 5_000]] as const) {
    for (let k = 0; k < rows; k++, i++) {
      const r = row(i, size);
      sink.row(r.buf, r.start, r.end);
      want.push({ i, pad: "x".repeat(size) });
    }
    const part = sink.take(false);
    parts.push(part);
    snapshots.push(dec.decode(part));
  }
  const last = sink.take(true);
  parts.push(last);
  snapshots.push(dec.decode(last));
  sink.release();
  // Every part still holds its bytes as taken, and together they are the whole array.
  assert.deepEqual(parts.map((p) => dec.decode(p)), snapshots);
  assert.deepEqual(JSON.parse(snapshots.join("")), want);
});

Deno.test("many answers one after another do not share bytes", () => {
  const outs: { out: Uint8Array; text: string }[] = [];
  for (let n = 0; n < 40; n++) {
    const sink = new JsonArraySink();
    const r = row(n, n % 2 === 0 ? 30 : 40_000);
    sink.row(r.buf, r.start, r.end);
    const out = sink.take(true);
    sink.release();
    outs.push({ out, text: dec.decode(out) });
  }
  for (const { out, text } of outs) assert.equal(dec.decode(out), text);
  assert.deepEqual(outs.map(({ text }) => JSON.parse(text)[0].i), [...Array(40).keys()]);
});

Deno.test("an answer built at its expected size is one buffer; given back, it serves the next answer", () => {
  const build = (expected: number, rows: number, size: number) => {
    const sink = new JsonArraySink(expected);
    for (let i = 0; i < rows; i++) {
      const r = row(i, size);
      sink.row(r.buf, r.start, r.end);
    }
    const n = sink.size;
    const out = sink.whole() as Uint8Array;
    sink.release();
    return { out, n };
  };
  const a = build(0, 7, 10_000);
  assert.equal(a.out.length, a.n + 1, "the whole answer: the rows and the closing bracket");
  const b = build(a.n, 7, 10_000);
  assert.equal(b.out.byteOffset, 0);
  assert.ok(b.out.buffer.byteLength >= b.n + 1, "built in the one buffer of the expected size");
  assert.ok(b.out.buffer.byteLength < 2 * b.n, "not grown by doubling");
  const text = dec.decode(b.out);
  // Given back after its response copied it: the next answer of that size reuses the buffer.
  recycleAnswer(b.out);
  const c = build(b.n, 7, 10_000);
  assert.equal(c.out.buffer, b.out.buffer, "the buffer given back serves the next answer");
  assert.equal(dec.decode(c.out), text);
  // Given back twice, or bytes the sink never handed over: never reused.
  recycleAnswer(c.out);
  recycleAnswer(c.out);
  const d = build(b.n, 7, 10_000);
  const e = build(b.n, 7, 10_000);
  assert.equal(d.out.buffer, c.out.buffer);
  assert.notEqual(e.out.buffer, d.out.buffer, "one buffer given back twice is reused once");
  const foreign = new Uint8Array(b.n + 100);
  recycleAnswer(foreign);
  const f = build(b.n, 7, 10_000);
  assert.notEqual(f.out.buffer, foreign.buffer, "bytes of another origin are left alone");
});

Deno.test("whole answers over the scratch size stay intact while later answers reuse grown and released buffers", () => {
  const answers: { out: Uint8Array | string; want: unknown[] }[] = [];
  for (let n = 0; n < 12; n++) {
    const sink = new JsonArraySink();
    const want: unknown[] = [];
    // 20 rows of ≈ 3.4 KB (the bench's nested read: 68 KB) or, every third answer, fewer and
    // bigger ones: the buffer grew past the scratch size.
    for (let i = 0; i < (n % 3 === 2 ? 3 : 20); i++) {
      const size = n % 3 === 2 ? 100_000 + n : 3_400 + n;
      const r = row(i, size);
      sink.row(r.buf, r.start, r.end);
      want.push({ i, pad: "x".repeat(size) });
    }
    const out = sink.whole();
    sink.release();
    assert.ok(out instanceof Uint8Array);
    answers.push({ out, want });
  }
  for (const [n, a] of answers.entries()) {
    assert.deepEqual(JSON.parse(dec.decode(a.out as Uint8Array)), a.want, `answer ${n}`);
  }
});
