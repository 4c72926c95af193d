/**
 * Where `pg.query.max_row_size` is enforced (real HTTP, real PostgreSQL): a plain read's oversized
 * row is refused by svc's own client (PostgreSQL runs the read without the cap's SQL: a wire proxy
 * stalls any statement carrying it) with 400 QUERY_RESULT_TOO_LARGE, svc's memory not growing by
 * the row's size, and the pool's one connection serves the next request; a read calling a VOLATILE
 * function and a write's read-back keep the SQL cap, so a refusal leaves nothing written.
 */
import assert from "node:assert/strict";
import { chinookDb, psql, scalar } from "../helpers/db.ts";
import { startServer, type TestServer } from "../helpers/server.ts";
import { pgProxy } from "../helpers/wireproxy.ts";
import { readMem, withPeak } from "../../bench/lib/procs.ts";
import { spawnSvc } from "../helpers/process.ts";

const ROW = 64 << 20;

const FIXTURE = `
create table big (id int primary key, body text);
insert into big values (1, repeat('x', ${ROW})), (2, 'small');
grant select on big to "~anonymous";
create table audit (n int);
grant insert, select on audit to "~anonymous";
create function noisy_big() returns setof big language plpgsql volatile as $$
begin insert into audit values (1); return query select * from big where id = 1; end $$;
grant execute on function noisy_big() to "~anonymous";
create table note (id serial primary key, body text);
grant select, insert on note to "~anonymous";
grant usage on sequence note_id_seq to "~anonymous";
`;

const T = { sanitizeResources: false, sanitizeOps: false };

function db(): Promise<string> {
  return chinookDb("rowcap", FIXTURE);
}

/** Backend pids of svc's connections to the test database. */
async function backends(): Promise<string> {
  const out = await psql(
    "select string_agg(pid::text, ',' order by pid) from pg_stat_activity " +
      "where datname = 'rowcap' and application_name = 'svc' and backend_type = 'client backend'",
    "rowcap",
  );
  return out.split("\n")[2]?.trim() ?? "";
}

async function tooLarge(r: Response): Promise<number> {
  const body = await r.json();
  assert.equal(r.status, 400, JSON.stringify(body));
  assert.equal(r.headers.get("x-svc-errorcode"), "QUERY_RESULT_TOO_LARGE");
  assert.equal(body.code, "QUERY_RESULT_TOO_LARGE");
  const m =
    /^one answer row is (\d+) bytes, more than pg\.query\.max_row_size allows; narrow the query \(select, where, limit on joins\)$/
      .exec(body.message);
  assert.ok(m, body.message);
  return Number(m[1]);
}

/** The three plain reads of the big row: by key (one round trip), the cursor read, GET. */
async function refuseBig(s: Pick<TestServer, "url" | "post">): Promise<number> {
  const size = await tooLarge(await s.post("/svc", { relation: "big", where: ["=", "id", 1] }));
  assert.ok(size > ROW && size < ROW + 100, `${size} bytes`);
  assert.equal(await tooLarge(await s.post("/svc", { relation: "big" })), size);
  assert.equal(await tooLarge(await fetch(`${s.url}/svc?relation=big`)), size);
  return size;
}

Deno.test({
  ...T,
  name: "a plain read's oversized row: 400 from svc's client, no SQL cap; the connection goes on",
  async fn() {
    const uri = await db();
    const port = Number(new URL(uri).port);
    const proxy = pgProxy(port);
    // Any statement carrying the SQL cap never reaches PostgreSQL (nor answers).
    proxy.stallOn("pg_column_size");
    let s: TestServer | null = null;
    try {
      s = await startServer(uri.replace(`:${port}/`, `:${proxy.port}/`), [
        "--pg.pool_size=1",
        "--pg.query.max_row_size=4096",
        "--pg.query.statement_timeout=10000",
        "--pg.lease_grace=2",
      ]);
      const small = await s.post("/svc", { relation: "big", where: ["=", "id", 2] });
      assert.equal(small.status, 200);
      assert.deepEqual(await small.json(), [{ id: 2, body: "small" }]);
      const pids = await backends();
      assert.match(pids, /^\d+$/, "one connection");
      await refuseBig(s);
      // The same connection (never discarded) answers the next requests.
      const after = await s.post("/svc", { relation: "big", where: ["=", "id", 2] });
      assert.equal(after.status, 200);
      assert.deepEqual(await after.json(), [{ id: 2, body: "small" }]);
      assert.equal(await backends(), pids);
      assert.equal(proxy.stalled(), 0);
    } finally {
      await s?.stop();
      proxy.close();
    }
  },
});

Deno.test({
  ...T,
  name: "a plain read's oversized row: svc's memory does not grow by the row's size",
  async fn() {
    // svc in a process of its own: the test runner's process holds other test files' servers.
    const svc = await spawnSvc([
      `--pg.uri=${await db()}`,
      "--http.workers=1",
      "--pg.pool_size=1",
      "--pg.query.max_row_size=4096",
      "--logging.level=error",
    ]);
    try {
      await svc.waitHealthy();
      const pid = svc.child.pid;
      const s = {
        url: svc.url,
        post: (path: string, body: unknown) =>
          fetch(svc.url + path, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(body),
          }),
      };
      // Warm up the paths.
      await (await s.post("/svc", { relation: "big", where: ["=", "id", 2] })).body?.cancel();
      await (await s.post("/svc", { relation: "big", select: ["id"] })).body?.cancel();
      const baseline = readMem(pid).rss_mb;
      const { peak } = await withPeak(pid, () => refuseBig(s), 10);
      const growth = peak - baseline;
      assert.ok(growth < 32, `svc's memory grew by ${growth.toFixed(0)} MiB for a 64 MiB row`);
      const after = await s.post("/svc", { relation: "big", where: ["=", "id", 2] });
      assert.equal(after.status, 200);
      await after.body?.cancel();
    } finally {
      await svc.stop();
    }
  },
});

Deno.test({
  ...T,
  name: "the SQL cap stays where a refusal must undo writes: a VOLATILE function's read, a write",
  async fn() {
    const s = await startServer(await db(), ["--pg.query.max_row_size=4096"]);
    try {
      // A small read (one batch, committed at its Sync) and a cursor read.
      await tooLarge(await s.post("/svc", { function: "noisy_big", limit: 5 }));
      await tooLarge(await s.post("/svc", { function: "noisy_big" }));
      assert.equal(await scalar("select count(*) from audit", "rowcap"), "0");
      // A write whose read-back row is over the cap writes nothing.
      const w = await s.post("/svc", {
        query: { relation: "note" },
        data: [{ body: "n".repeat(5000) }],
      });
      await tooLarge(w);
      assert.equal(await scalar("select count(*) from note", "rowcap"), "0");
      // Under the cap, the same write goes through.
      const ok = await s.post("/svc", { query: { relation: "note" }, data: [{ body: "n" }] });
      assert.equal(ok.status, 200);
      await ok.body?.cancel();
      assert.equal(await scalar("select count(*) from note", "rowcap"), "1");
    } finally {
      await s.stop();
    }
  },
});
