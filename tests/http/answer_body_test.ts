/**
 * A streamed answer's chunks, once Deno's HTTP response took them, are let go of at once
 * (detached: their memory is freed when the socket took them, not at a later garbage collection),
 * and only those nothing else reads: pieces marked as the last of their buffer and chunks the
 * answer joined itself (src/util/handoff.ts). Any other reader keeps every chunk. Through a real
 * `Deno.serve` and a real HTTP client.
 */
import assert from "node:assert/strict";
import { ANSWER_BUFFER, servedByRuntime, StreamingAnswer } from "../../src/http/answer_body.ts";
import { markSole } from "../../src/util/handoff.ts";

const PIECE = 256 * 1024;

const detached = (p: Uint8Array) => (p.buffer as ArrayBuffer).detached;

/** Pieces of distinct fill bytes: even ones marked sole, odd ones not, then small parts. */
function pieces(n: number): { big: Uint8Array[]; small: Uint8Array[] } {
  const big = Array.from({ length: n }, (_, i) => {
    const p = new Uint8Array(PIECE).fill(i % 251);
    return i % 2 === 0 ? markSole(p) : p;
  });
  // Small parts are joined into chunks of the answer's own.
  const small = Array.from({ length: 64 }, (_, i) => new Uint8Array(4096).fill(200 + (i % 50)));
  return { big, small };
}

/** Pushes every piece as the query stage does (flush, waiting when the client is behind). */
async function produce(a: StreamingAnswer, big: Uint8Array[], small: Uint8Array[]) {
  for (const p of [...big, ...small]) {
    a.push(p);
    const taken = a.flush();
    if (taken) await taken;
  }
  await a.settled();
  await a.end();
}

function expected(big: Uint8Array[], small: Uint8Array[]): Uint8Array {
  const all = [...big, ...small].map((p) => p.slice());
  const out = new Uint8Array(all.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of all) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

Deno.test("an answer served by Deno.serve lets go of the chunks the runtime took", async () => {
  const { big, small } = pieces(24);
  assert.ok(big.length * PIECE > ANSWER_BUFFER);
  const want = expected(big, small);
  let produced: Promise<void> = Promise.resolve();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
    const { promise, resolve } = Promise.withResolvers<Response>();
    const a = new StreamingAnswer((body) => {
      servedByRuntime(body);
      resolve(new Response(body));
    });
    produced = produce(a, big, small);
    return promise;
  });
  try {
    const r = await fetch(`http://127.0.0.1:${server.addr.port}/`);
    const got = new Uint8Array(await r.arrayBuffer());
    await produced;
    assert.equal(got.length, want.length);
    assert.deepEqual(got, want, "every byte, in order");
    // The first pieces were held (the buffer) and joined into one chunk; every later piece marked
    // sole went out as it was and was let go of once taken (the last read may still hold one);
    // the others never.
    const joined = Math.floor(ANSWER_BUFFER / PIECE) + 1;
    const soleStreamed = big.filter((_, i) => i >= joined && i % 2 === 0);
    const released = soleStreamed.filter((p) => detached(p)).length;
    assert.ok(
      released >= soleStreamed.length - 1,
      `${released} of ${soleStreamed.length} released`,
    );
    for (let i = 0; i < big.length; i++) {
      if (i % 2 === 1 || i < joined) assert.equal(detached(big[i]), false, `piece ${i}`);
    }
    for (const p of small) assert.equal(detached(p), false);
  } finally {
    await server.shutdown();
  }
});

Deno.test("an answer read by anything but the runtime keeps every chunk", async () => {
  const { big, small } = pieces(12);
  const want = expected(big, small);
  const { promise, resolve } = Promise.withResolvers<ReadableStream<Uint8Array>>();
  const a = new StreamingAnswer(resolve);
  const produced = produce(a, big, small);
  // Collected in this process: every chunk read stays in the reader's hands.
  const got = new Uint8Array(await new Response(await promise).arrayBuffer());
  await produced;
  assert.deepEqual(got, want);
  for (const p of big) assert.equal(detached(p), false);
});

Deno.test("a client that stops reading fails the answer's next wait", async () => {
  const { big } = pieces(16);
  const { promise, resolve } = Promise.withResolvers<ReadableStream<Uint8Array>>();
  const a = new StreamingAnswer(resolve);
  const produced = (async () => {
    for (const p of big) {
      a.push(p);
      const taken = a.flush();
      if (taken) await taken;
    }
    await a.settled();
  })();
  const reader = (await promise).getReader();
  await reader.read();
  await reader.cancel(new Error("gone"));
  await assert.rejects(produced, /gone/);
});
