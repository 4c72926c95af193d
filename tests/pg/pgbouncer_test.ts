/**
 * The client behind PgBouncer 1.18: session mode with named prepared statements, transaction mode
 * with unnamed ones (maxStatements 0) and several clients sharing few server connections; and why
 * transaction mode needs that: two clients naming their statements alike collide.
 */
import assert from "node:assert/strict";
import { Connection } from "../../src/pg/connection.ts";
import { emptyDb, stopDb, testCluster } from "../helpers/db.ts";
import { bouncerTest, startBouncer } from "../helpers/pgbouncer.ts";

const T = { sanitizeResources: false, sanitizeOps: false };
const FIXTURE = "create table kv (k int primary key, v text); " +
  "insert into kv select g, 'v' || g from generate_series(1, 100) g";

async function requestLike(c: Connection, k: number): Promise<unknown> {
  const rs = await c.execute([
    { sql: "begin" },
    { sql: "select set_config('svc.request_id', $1, true)", params: [`r${k}`] },
    { sql: "select v, current_setting('svc.request_id') as rid from kv where k = $1", params: [k] },
    { sql: "commit" },
  ]);
  return rs[2].rows[0];
}

bouncerTest({
  ...T,
  name: "pgbouncer: session mode with named prepared statements",
  async fn() {
    await emptyDb("bouncer", FIXTURE);
    const cluster = await testCluster();
    const b = await startBouncer(cluster.port, "session");
    try {
      const c = await Connection.connect(b.uriFor("bouncer"));
      for (let k = 1; k <= 20; k++) {
        assert.deepEqual(await requestLike(c, k), { v: `v${k}`, rid: `r${k}` });
      }
      const e = await c.execute([{ sql: "select 1/0" }]).catch((x) => x);
      assert.equal(e.code, "22012");
      const [r] = await c.execute([{
        sql: "select count(*)::int as n from pg_prepared_statements",
        prepare: false,
      }]);
      assert.ok((r.rows[0].n as number) >= 4);
      await c.close();
    } finally {
      await b.stop();
    }
  },
});

bouncerTest({
  ...T,
  name: "pgbouncer: transaction mode, unnamed statements, 6 clients over 2 server connections",
  async fn() {
    await emptyDb("bouncer", FIXTURE);
    const cluster = await testCluster();
    const b = await startBouncer(cluster.port, "transaction", 2);
    try {
      const clients = await Promise.all(
        Array.from(
          { length: 6 },
          () => Connection.connect(b.uriFor("bouncer"), { maxStatements: 0 }),
        ),
      );
      await Promise.all(clients.map(async (c, i) => {
        for (let n = 0; n < 30; n++) {
          const k = 1 + ((i * 31 + n) % 100);
          assert.deepEqual(await requestLike(c, k), { v: `v${k}`, rid: `r${k}` });
          if (n % 10 === 0) {
            // A failed transaction is rolled back by its own batch's end; the client goes on.
            const e = await c.execute([{ sql: "begin" }, { sql: "select 1/0" }, { sql: "commit" }])
              .catch((x) => x);
            assert.equal(e.code, "22012");
            await c.simple("rollback");
          }
        }
      }));
      await Promise.all(clients.map((c) => c.close()));
    } finally {
      await b.stop();
    }
  },
});

bouncerTest({
  ...T,
  name:
    "pgbouncer: transaction mode with named statements collides (why pg.prepared_statements exists)",
  async fn() {
    await emptyDb("bouncer", FIXTURE);
    const cluster = await testCluster();
    const b = await startBouncer(cluster.port, "transaction", 1);
    try {
      const a = await Connection.connect(b.uriFor("bouncer"));
      const c = await Connection.connect(b.uriFor("bouncer"));
      await a.execute([{ sql: "select 1 as a" }]);
      // Same server connection, same first statement name, other text.
      const e = await c.execute([{ sql: "select 2 as b" }]).catch((x) => x);
      assert.equal(e.code, "42P05");
      await a.close();
      await c.close();
    } finally {
      await b.stop();
    }
  },
});

bouncerTest({ ...T, name: "pgbouncer: stop", fn: () => stopDb() });
