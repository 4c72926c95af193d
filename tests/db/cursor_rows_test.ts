/**
 * A cursor read's rows (`tx.rows`, the batch and complex reads' streaming path) are copied out of
 * the receive buffer into shared slabs, not one array buffer per row: a batch of 1,000 wide rows
 * as 1,000 small buffers outlived the young generation while the client took them and left glibc's
 * heap fragmented and large for good (docs/performance.md, "Memory"). Through a real cluster.
 */
import assert from "node:assert/strict";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { Database } from "../../src/db/pool.ts";
import { ROW_SLAB_MAX, transaction } from "../../src/db/run_as.ts";

Deno.test("a cursor read's rows share a few slabs and keep their bytes", async () => {
  const uri = await emptyDb("cursor_rows");
  const db = new Database(uri, 1);
  const who = { role: "postgres", claims: null };
  const dec = new TextDecoder();
  try {
    const batches: Uint8Array[][] = [];
    // 3,000 rows of ≈ 2 KB (the last one larger than a slab quarter: a buffer of its own) and a
    // null, in batches of 1,000.
    const sql = `select case when i = 3001 then null
                   when i = 3000 then to_json(repeat('y', ${ROW_SLAB_MAX / 2}))
                   else json_build_object('i', i, 's', repeat('x', 2000)) end as j
                 from generate_series(1, 3001) i order by i`;
    await transaction(db, who, (tx) =>
      tx.rows(sql, [], 1000, (rows) => {
        batches.push(rows);
      }));
    const rows = batches.flat();
    assert.equal(batches.length, 4);
    assert.equal(rows.length, 3001);
    // Every row's bytes are its own, intact after later rows were copied.
    for (let i = 0; i < 2999; i++) {
      const v = JSON.parse(dec.decode(rows[i]));
      assert.equal(v.i, i + 1);
      assert.equal(v.s.length, 2000);
    }
    assert.equal(dec.decode(rows[2999]).length, ROW_SLAB_MAX / 2 + 2);
    assert.equal(dec.decode(rows[3000]), "null");
    // ≈ 6 MB of rows in a few dozen array buffers, not 3,000.
    const buffers = new Set(rows.slice(0, 2999).map((r) => r.buffer));
    assert.ok(buffers.size <= 40, `${buffers.size} array buffers for 2,999 rows`);
    for (const b of buffers) assert.ok(b.byteLength <= ROW_SLAB_MAX, `${b.byteLength} bytes`);
  } finally {
    await db.close();
    await stopDb();
  }
});
