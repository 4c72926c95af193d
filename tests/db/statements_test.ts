/**
 * A pooled connection keeps at most MAX_STATEMENTS named prepared statements (the driver svc used
 * before kept one per distinct query text for the connection's life, in svc and in the server
 * session; now the least recently used is closed): through a real cluster, more distinct statements than that all answer
 * correctly and the server session holds at most MAX_STATEMENTS.
 */
import assert from "node:assert/strict";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { Database, MAX_STATEMENTS } from "../../src/db/pool.ts";
import { transaction } from "../../src/db/run_as.ts";

Deno.test("a connection prepares at most MAX_STATEMENTS statements", async () => {
  const uri = await emptyDb("statements");
  const db = new Database(uri, 1);
  const who = { role: "postgres", claims: null };
  try {
    const n = MAX_STATEMENTS + 300;
    const held = await transaction(db, who, async (tx) => {
      for (let i = 0; i < n; i++) {
        const rows = await tx.query(`select $1::int + ${i} as n`, [7]);
        assert.equal(rows[0].n, 7 + i);
      }
      // A recent statement run again: still prepared, still answers.
      const again = await tx.query(`select $1::int + ${n - 1} as n`, [1]);
      assert.equal(again[0].n, n);
      const r = await tx.query("select count(*)::int as c from pg_prepared_statements", [], {
        prepare: false,
      });
      return r[0].c as number;
    });
    assert.ok(held <= MAX_STATEMENTS, `${held} prepared statements`);
    assert.ok(held >= MAX_STATEMENTS - 10, `${held}: the cache stays full`);
  } finally {
    await db.close();
    await stopDb();
  }
});
