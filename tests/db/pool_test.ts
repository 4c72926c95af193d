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
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
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
    assert.deepEqual(JSON.parse(new TextDecoder().decode(out as Uint8Array)), [{ u: "app_user" }]);
    // Nothing of a request's settings survives it.
    const [rows] = await pipeline(db, anon, [{
      sql: "select current_setting('svc.jwt.claims') as claims",
      params: [],
    }]);
    assert.deepEqual(rows[0].claims, "null");
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

Deno.test("pool: stop", async () => {
  await stopDb();
});
