/**
 * The client's row cap (a row sink's `maxRowBytes`, src/pg/connection.ts) against a real
 * PostgreSQL 15 and, for arrival in tiny chunks, a fake server: a row over the cap fails its
 * statement with a PgRowTooLargeError whose size is the row's, its bytes are skipped as they come
 * (the process's memory does not grow by the row's size), the rest of the batch is read up to its
 * ReadyForQuery and the same connection runs the next batch; a row exactly at the cap passes.
 */
import assert from "node:assert/strict";
import { Connection } from "../../src/pg/connection.ts";
import { PgFetchTooLargeError, PgRowTooLargeError } from "../../src/pg/errors.ts";
import { JsonArraySink } from "../../src/http/json_body.ts";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { runProbe } from "../helpers/probe.ts";
import { B, concat, type FakeConn, fakeServer, hello } from "./fake_server.ts";

const PROBE = new URL("../fixtures/row_cap_probe.ts", import.meta.url).pathname;

const T = { sanitizeResources: false, sanitizeOps: false };

async function open(uri?: string): Promise<Connection> {
  return await Connection.connect(uri ?? await emptyDb("rowcap"), { connectTimeoutMs: 10_000 });
}

function capped(maxRowBytes: number): JsonArraySink {
  const sink = new JsonArraySink();
  sink.maxRowBytes = maxRowBytes;
  return sink;
}

async function refusal(p: Promise<unknown>): Promise<PgRowTooLargeError> {
  const e = await p.then(() => null, (e) => e);
  assert.ok(e instanceof PgRowTooLargeError, `refused: ${e}`);
  return e;
}

Deno.test({
  ...T,
  name: "row cap: a 96 MiB row over a 1 MiB cap is refused, never buffered; the connection goes on",
  async fn() {
    // In a process of its own: the test runner's process holds other test files' work.
    const { text, result: r } = await runProbe<{
      refused: boolean;
      rowBytes: number;
      maxRowBytes: number;
      statementIndex: number;
      growth: number;
      before: string;
      state: unknown;
      next: unknown;
    }>(PROBE, [await emptyDb("rowcap"), "96"]);
    assert.ok(r.refused, text);
    assert.equal(r.rowBytes, 96 << 20);
    assert.equal(r.maxRowBytes, 1 << 20);
    assert.equal(r.statementIndex, 0);
    assert.ok(r.growth < 48, `memory grew by ${r.growth.toFixed(0)} MiB`);
    // The row before the refused one came; none after it.
    assert.equal(r.before, `[${"x".repeat(10)}]`);
    // A clean protocol state: the same connection runs the next batch.
    assert.deepEqual(r.state, { error: null, txStatus: "I" });
    assert.deepEqual(r.next, [{ seven: 7 }]);
  },
});

Deno.test({
  ...T,
  name: "row cap: a row exactly at the cap passes, one byte more is refused (small and large rows)",
  async fn() {
    const c = await open();
    try {
      for (const n of [100, 300_000]) {
        const sink = capped(n);
        await c.execute([{ sql: "select repeat('y', $1::int)", params: [n], sink }]);
        assert.equal(sink.take(true).length, n + 2, `a row of ${n} bytes under a cap of ${n}`);
        const e = await refusal(
          c.execute([{ sql: "select repeat('y', $1::int)", params: [n], sink: capped(n - 1) }]),
        );
        assert.equal(e.rowBytes, n);
        const [r] = await c.execute([{ sql: "select 1 as one" }]);
        assert.deepEqual(r.rows, [{ one: 1 }]);
      }
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "row cap: a portal read with a row limit refuses a row of a later fetch; rollback, go on",
  async fn() {
    const c = await open();
    try {
      const sink = capped(1000);
      const sql =
        "select repeat('z', case when g = 5 then 200000 else 3 end) from generate_series(1, 8) g";
      const [, first] = await c.execute([{ sql: "begin" }, { sql, sink, maxRows: 3 }]);
      assert.equal(first.suspended, true);
      const e = await refusal(c.fetch("", 3, { sink }));
      assert.equal(e.rowBytes, 200000);
      assert.equal(c.txStatus, "T");
      await c.execute([{ sql: "rollback" }]);
      const [r] = await c.execute([{ sql: "select 2 as two" }]);
      assert.deepEqual(r.rows, [{ two: 2 }]);
      assert.equal(c.txStatus, "I");
    } finally {
      await c.close();
    }
  },
});

/**
 * Answers each batch of the fake server with rows `a`, a row of `n` bytes, `c`: everything up to
 * the big row's first 12 bytes (its header, column count and length) one byte at a time, the rest
 * in pieces of up to 600 bytes.
 */
async function answerRows(c: FakeConn, sizes: number[]): Promise<void> {
  if (!await c.startup()) return;
  await c.send(hello());
  for (let batch = 0;; batch++) {
    const msgs = await c.untilSync();
    if (!msgs.length || msgs.some((m) => m.type === "X")) return;
    const n = sizes[Math.min(batch, sizes.length - 1)];
    const head = concat([
      B.parseComplete(),
      B.bindComplete(),
      B.rowDescription([{ name: "j", oid: 25 }]),
      B.dataRow(["a"]),
    ]);
    const body = concat([
      head,
      B.dataRow(["b".repeat(n)]),
      B.dataRow(["c"]),
      B.commandComplete("SELECT 3"),
      B.rfq(),
    ]);
    const chunks: number[] = [];
    for (let i = 0; i < head.length + 12; i++) chunks.push(1);
    for (let o = head.length + 12; o < body.length; o += chunks[chunks.length - 1]) {
      chunks.push(1 + (o * 7919) % 600);
    }
    await c.send(body, chunks);
  }
}

Deno.test({
  ...T,
  name: "row cap: rows arriving in tiny chunks (headers split byte by byte) are capped exactly",
  async fn() {
    const n = 100_000;
    const srv = fakeServer((c) => answerRows(c, [n, n, n - 1, 5]));
    const c = await open(srv.uri);
    try {
      // A cap of n: the row passes whole.
      const ok = capped(n);
      await c.execute([{ sql: "select j", prepare: false, sink: ok }]);
      const text = new TextDecoder().decode(ok.take(true));
      assert.equal(text, `[a,${"b".repeat(n)},c]`);
      // One byte under: refused, the rest of the answer read, the connection usable.
      const e = await refusal(
        c.execute([{ sql: "select j", prepare: false, sink: capped(n - 1) }]),
      );
      assert.equal(e.rowBytes, n);
      assert.equal(c.error, null);
      const next = capped(n - 1);
      await c.execute([{ sql: "select j", prepare: false, sink: next }]);
      assert.equal(new TextDecoder().decode(next.take(true)).length, n - 1 + 6);
      const small = capped(4);
      const e2 = await refusal(c.execute([{ sql: "select j", prepare: false, sink: small }]));
      assert.equal(e2.rowBytes, 5);
    } finally {
      await c.close();
      srv.close();
    }
  },
});

Deno.test({
  ...T,
  name: "fetch budget: rows past maxFetchBytes are refused after the first; the portal goes on",
  async fn() {
    const c = await open();
    try {
      const sql = "select repeat('z', 1000) from generate_series(1, 50)";
      await c.execute([{ sql: "begin" }]);
      // 3,500 bytes a fetch: 3 rows of 1,000 fit, the 4th is refused (its bytes skipped).
      const budget = (n: number) => {
        const sink = new JsonArraySink(0, Infinity, n);
        return sink;
      };
      const e = await c.execute([{ sql, sink: budget(3500), maxRows: 40, portal: "p1" }])
        .then(() => null, (e) => e);
      assert.ok(e instanceof PgFetchTooLargeError, `refused: ${e}`);
      assert.equal(e.rows, 3);
      assert.equal(e.maxFetchBytes, 3500);
      // The connection is usable and the transaction open: a new portal asks for 3 at a time, and
      // the first row always passes, even over the budget.
      const sink = budget(3500);
      const [r] = await c.execute([{ sql, sink, maxRows: 3, portal: "p2" }]);
      assert.ok(r.suspended);
      assert.equal(sink.rows, 3);
      const one = budget(10);
      const more = await c.fetch("p2", 1, { sink: one });
      assert.equal(one.rows, 1);
      assert.ok(more.suspended);
      await c.execute([{ sql: "commit" }]);
      const [x] = await c.execute([{ sql: "select 7 as seven" }]);
      assert.deepEqual(x.rows, [{ seven: 7 }]);
    } finally {
      await c.close();
    }
  },
});

Deno.test({ ...T, name: "row cap: stop", fn: () => stopDb() });
