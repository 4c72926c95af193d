/**
 * The request pool keeps a client's connection reserved between successful requests: every
 * request still runs in its own transaction as its own role, a failed request gives the
 * reservation up, a connection closed while held is reconnected on the next use, and close()
 * does not wait for held reservations.
 */
import assert from "node:assert/strict";
import { Database } from "../../src/db/pool.ts";
import { pipeline } from "../../src/db/run_as.ts";
import { readJson } from "../../src/http/json_body.ts";
import type { RequestRole } from "../../src/auth/roles.ts";
import { chinookDb, psql, scalar, stopDb } from "../helpers/db.ts";
import { testConfig } from "../helpers/server.ts";
import { ConfigError } from "../../src/config/load.ts";
import { waitFor } from "../helpers/wait.ts";

const anon: RequestRole = { role: "~anonymous", claims: null, requestId: "r-anon" };
const user: RequestRole = { role: "app_user", claims: { role: "app_user" }, requestId: "r-user" };

const WHO = "select pg_backend_pid() as pid, current_user as u, " +
  "current_setting('svc.request_id') as rid, txid_current()::text as tx";

async function who(db: Database, r: RequestRole) {
  const [rows] = await pipeline(db, r, [{ sql: WHO, params: [] }]);
  return rows[0] as { pid: number; u: string; rid: string; tx: string };
}

Deno.test("pool: a held connection serves each request as its own role and transaction", async () => {
  const uri = await chinookDb();
  await psql(`grant usage on schema public to "~anonymous", app_user`);
  const db = new Database(uri, 1);
  try {
    const a = await who(db, anon);
    const b = await who(db, user);
    const c = await who(db, anon);
    // One connection, kept between requests.
    assert.deepEqual(b.pid, a.pid);
    assert.deepEqual(c.pid, a.pid);
    assert.deepEqual([a.u, b.u, c.u], ["~anonymous", "app_user", "~anonymous"]);
    assert.deepEqual([a.rid, b.rid, c.rid], ["r-anon", "r-user", "r-anon"]);
    // Each request ran in its own transaction.
    assert.equal(new Set([a.tx, b.tx, c.tx]).size, 3);
    // The small read path on the same held connection.
    const out = await readJson(db, user, "select json_build_object('u', current_user)", [], {
      small: true,
    });
    // A small whole answer comes as text (src/http/json_body.ts), a large one as bytes.
    const text = typeof out === "string" ? out : new TextDecoder().decode(out as Uint8Array);
    assert.deepEqual(JSON.parse(text), [{ u: "app_user" }]);
    // Nothing of a request's settings survives it.
    const [rows] = await pipeline(db, anon, [{
      sql: "select current_setting('svc.jwt.claims') as claims",
      params: [],
    }]);
    assert.deepEqual(rows[0].claims, "null");
    // The small read's batch (role switch and query, no begin/commit) is one transaction of its
    // own: its role, claims and timeout end with it, on the connection the next request gets.
    await readJson(db, user, "select to_json(current_user)", [], { small: true });
    const lease = await db.acquire();
    try {
      assert.equal(lease.conn.txStatus, "I");
      const [r] = await lease.conn.simple(
        "select current_user as u, current_setting('svc.jwt.claims', true) as c, " +
          "current_setting('svc.request_id', true) as rid",
      );
      assert.notEqual(r.rows[0].u, "app_user");
      assert.ok(!r.rows[0].c, `claims left behind: ${r.rows[0].c}`);
      assert.ok(!r.rows[0].rid, `request id left behind: ${r.rows[0].rid}`);
    } finally {
      lease.release(true);
    }
  } finally {
    await db.close();
  }
});

Deno.test("pool: a failed request gives its reservation up; the next one runs normally", async () => {
  const uri = await chinookDb();
  const db = new Database(uri, 1);
  try {
    const before = await who(db, user);
    await assert.rejects(() => pipeline(db, user, [{ sql: "select 1/0", params: [] }]));
    await assert.rejects(() => readJson(db, user, "select (1/0)::text::json", [], { small: true }));
    const after = await who(db, user);
    assert.deepEqual(after.u, "app_user");
    assert.deepEqual(after.pid, before.pid); // the connection itself was fine
    assert.notEqual(after.tx, before.tx);
  } finally {
    await db.close();
  }
});

Deno.test("pool: a held connection that PostgreSQL closes is reconnected on the next request", async () => {
  const uri = await chinookDb();
  const db = new Database(uri, 1);
  try {
    const first = await who(db, anon);
    await psql(`select pg_terminate_backend(${first.pid})`);
    // The next request may race the close event; once it is seen, requests reconnect.
    const next = await waitFor(() => who(db, anon).catch(() => undefined), {
      what: "a request succeeding after the connection was closed",
    });
    assert.notEqual(next.pid, first.pid);
    assert.deepEqual(next.u, "~anonymous");
  } finally {
    await db.close();
  }
});

Deno.test("pool: close() does not wait for held reservations", async () => {
  const uri = await chinookDb();
  const db = new Database(uri, 3);
  await Promise.all([who(db, anon), who(db, anon), who(db, user)]);
  const t0 = performance.now();
  await db.close(5);
  assert.ok(performance.now() - t0 < 4000, `close took ${performance.now() - t0} ms`);
});

Deno.test("pool: text parameters of every length and script arrive intact (patched encoder)", async () => {
  const uri = await chinookDb();
  const db = new Database(uri, 1);
  try {
    const values = [
      "",
      "a",
      "é",
      "a".repeat(63) + "é",
      "a".repeat(64),
      "é" + "a".repeat(63),
      "a".repeat(65) + "ü",
      "名前",
      "🎵".repeat(40),
      "x".repeat(5000),
      "mixed ascii then 名前 then ascii",
    ];
    const statements = values.map((v) => ({
      sql: "select $1::text as v, octet_length($1::text) as n",
      params: [v],
    }));
    const results = await pipeline(db, anon, statements);
    results.forEach(([row], i) => {
      assert.equal(row.v, values[i]);
      assert.equal(row.n, new TextEncoder().encode(values[i]).length);
    });
    // Statement text (Parse) with non-ASCII.
    const [[row]] = await pipeline(db, anon, [{
      sql: "select 'ünï' || $1::text as v",
      params: ["ß"],
    }]);
    assert.equal(row.v, "ünïß");
  } finally {
    await db.close();
  }
});

Deno.test("pool: pg.max_lifetime replaces a connection once it is that old, without failing a request", async () => {
  const uri = await chinookDb();
  await psql(`grant usage on schema public to "~anonymous"`);
  const lifetime = 0.5;
  const db = new Database(uri, { size: 2, maxLifetime: lifetime });
  const AGE = "select pg_backend_pid() as pid, extract(epoch from statement_timestamp() - " +
    "(select backend_start from pg_stat_activity where pid = pg_backend_pid()))::float8 as age";
  try {
    const seen: { pid: number; age: number }[] = [];
    const end = Date.now() + 2500;
    // Three callers on two connections, back to back: no pause in which a connection could idle.
    await Promise.all([0, 1, 2].map(async () => {
      while (Date.now() < end) {
        const [rows] = await pipeline(db, anon, [{ sql: AGE, params: [] }]);
        seen.push(rows[0] as { pid: number; age: number });
      }
    }));
    const pids = new Set(seen.map((s) => s.pid));
    assert.ok(pids.size >= 4, `connections replaced: ${pids.size} backends served the requests`);
    // No statement ran on a connection older than its lifetime (connect and scheduling slack).
    const oldest = Math.max(...seen.map((s) => s.age));
    assert.ok(
      oldest < lifetime + 0.4,
      `a statement ran on a ${oldest.toFixed(3)} s old connection`,
    );
    // Retired connections are closed, not leaked.
    await waitFor(async () =>
      Number(
        await scalar(`select count(*) from pg_stat_activity where application_name = 'svc'`),
      ) <= 2, { what: "retired connections closed" });
  } finally {
    await db.close();
  }
  // 0: connections live for ever (the same backend after the lifetime above).
  const forever = new Database(uri, { size: 1, maxLifetime: 0 });
  try {
    const [[a]] = await pipeline(forever, anon, [{ sql: AGE, params: [] }]);
    await new Promise((r) => setTimeout(r, (lifetime + 0.2) * 1000)); // the time that must pass
    const [[b]] = await pipeline(forever, anon, [{ sql: AGE, params: [] }]);
    assert.equal(b.pid, a.pid);
  } finally {
    await forever.close();
  }
});

Deno.test("config: pg.max_lifetime is 3600 s by default and not negative", () => {
  const cfg = testConfig("postgres://x@127.0.0.1:1/x");
  assert.equal(cfg.pg.max_lifetime, 3600);
  assert.equal(
    testConfig("postgres://x@127.0.0.1:1/x", ["--pg.max_lifetime=0"]).pg.max_lifetime,
    0,
  );
  assert.throws(
    () => testConfig("postgres://x@127.0.0.1:1/x", ["--pg.max_lifetime=-1"]),
    (e: unknown) => e instanceof ConfigError && /pg\.max_lifetime/.test(e.message),
  );
});

Deno.test("pool: stop", async () => {
  await stopDb();
});
