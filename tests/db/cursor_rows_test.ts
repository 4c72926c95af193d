/**
 * A cursor read's rows (`tx.rows`, the batch and complex reads' streaming path) are written out
 * of the receive buffer into shared slabs as pieces of one JSON array, not one array buffer per
 * row: a batch of 1,000 wide rows as 1,000 small buffers outlived the young generation while the
 * client took them and left glibc's heap fragmented and large for good (docs/performance.md,
 * "Memory"). Through a real cluster.
 */
import assert from "node:assert/strict";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { Database } from "../../src/db/pool.ts";
import { ROW_SLAB_MAX, transaction } from "../../src/db/run_as.ts";
import { isSole } from "../../src/util/handoff.ts";

const dec = new TextDecoder();

Deno.test("a cursor read's rows come as a few slab-sized pieces of one JSON array", async () => {
  const uri = await emptyDb("cursor_rows");
  const db = new Database(uri, 1);
  const who = { role: "postgres", claims: null };
  try {
    const batches: Uint8Array[][] = [];
    // 3,000 rows of ≈ 2 KB, one larger than a slab, and a null, in batches of 1,000.
    const sql = `select case when i = 3001 then null
                   when i = 3000 then to_json(repeat('y', ${ROW_SLAB_MAX * 2}))
                   else json_build_object('i', i, 's', repeat('x', 2000)) end as j
                 from generate_series(1, 3001) i order by i`;
    const n = await transaction(db, who, (tx) =>
      tx.rows(sql, [], 1000, (pieces) => {
        batches.push(pieces);
      }));
    assert.equal(n, 3001);
    assert.equal(batches.length, 4);
    // Every piece still holds its bytes after later rows were written: together, the array.
    const pieces = batches.flat();
    const rows = JSON.parse(pieces.map((p) => dec.decode(p)).join("") + "]");
    assert.equal(rows.length, 3001);
    for (let i = 0; i < 2999; i++) {
      assert.equal(rows[i].i, i + 1);
      assert.equal(rows[i].s.length, 2000);
    }
    assert.equal(rows[2999].length, ROW_SLAB_MAX * 2);
    assert.equal(rows[3000], null);
    // ≈ 6 MB in a few dozen pieces and array buffers, not one per row.
    assert.ok(pieces.length <= 40, `${pieces.length} pieces for 3,001 rows`);
    const buffers = new Set(pieces.map((p) => p.buffer));
    assert.ok(buffers.size <= 40, `${buffers.size} array buffers for 3,001 rows`);
    for (const p of pieces) {
      if (p.length <= ROW_SLAB_MAX) assert.ok(p.buffer.byteLength <= ROW_SLAB_MAX);
    }
    // A piece is marked as its buffer's last (src/util/handoff.ts: the answer may let go of the
    // buffer once it handed it on) only when no later piece shares that buffer. The read's very
    // last piece is marked too: no row follows it (unmarked, each batch item's final slab waited
    // for the collector, ≈ 0.23 MiB an item kept to the end of a wide batch).
    for (let i = 0; i < pieces.length; i++) {
      if (!isSole(pieces[i])) continue;
      assert.ok(pieces.slice(i + 1).every((q) => q.buffer !== pieces[i].buffer), `piece ${i}`);
    }
    assert.ok(pieces.filter(isSole).length >= buffers.size - 4, "retired slabs are marked");
    assert.equal(isSole(pieces.at(-1)!), true, "the final piece is marked");
  } finally {
    await db.close();
    await stopDb();
  }
});

Deno.test("a cursor read without rows hands out no piece", async () => {
  const uri = await emptyDb("cursor_rows_none");
  const db = new Database(uri, 1);
  const who = { role: "postgres", claims: null };
  try {
    let calls = 0;
    const n = await transaction(
      db,
      who,
      (tx) =>
        tx.rows("select 1 as j where false", [], 1000, () => {
          calls++;
        }),
    );
    assert.equal(n, 0);
    assert.equal(calls, 0);
  } finally {
    await db.close();
    await stopDb();
  }
});
