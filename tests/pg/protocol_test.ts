/**
 * The client against a real PostgreSQL 15: every backend message type it handles, one write
 * per batch (counted by a wire proxy), the bounded statement cache, unnamed statements, cancel,
 * value decoding, and failure: a terminated backend fails everything pending at once.
 */
import assert from "node:assert/strict";
import {
  Connection,
  type ConnectionOptions,
  MAX_PREPARED_CHARS,
  MAX_PREPARED_SQL,
} from "../../src/pg/connection.ts";
import { PgConnectionError, PgError, type PgFields } from "../../src/pg/errors.ts";
import { JsonArraySink } from "../../src/http/json_body.ts";
import { emptyDb, psql, stopDb } from "../helpers/db.ts";
import { pgProxy } from "../helpers/wireproxy.ts";

const FIXTURE = `
create table item (id int primary key, name text not null, price numeric, tags text[]);
insert into item values (1, 'a', 1.5, '{x,"y z",NULL}'), (2, 'b', null, '{}');
create function boom() returns void language plpgsql as $$
begin raise exception 'went wrong' using detail = 'the detail', hint = 'the hint',
  errcode = 'RS418'; end $$;
`;

let uri: Promise<string> | null = null;
function db(): Promise<string> {
  uri ??= emptyDb("pgproto", FIXTURE);
  return uri;
}

async function open(opts: ConnectionOptions = {}): Promise<Connection> {
  return await Connection.connect(await db(), { connectTimeoutMs: 10_000, ...opts });
}

const T = { sanitizeResources: false, sanitizeOps: false };

Deno.test({
  ...T,
  name: "protocol: values decode by type",
  async fn() {
    const c = await open();
    try {
      const [r] = await c.execute([{
        sql: `select 1::int2 as i2, 2::int4 as i4, 3::int8 as i8, 1.5::float8 as f,
          1.25::numeric as n, true as b, false as bf, 'tx' as t, null::text as z,
          '{"a":[1,null]}'::json as j, '{"b":2}'::jsonb as jb, '{1,2,NULL}'::int[] as ai,
          '{"a b","c\\"d",NULL,"NULL"}'::text[] as at, '{{1,2},{3,4}}'::int[] as nested,
          '{}'::text[] as empty, array['x','y']::name[] as names, '\\x00ff'::bytea as by,
          '2024-01-02 03:04:05+00'::timestamptz as ts, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid as u`,
      }]);
      const row = r.rows[0];
      assert.deepEqual(row, {
        i2: 1,
        i4: 2,
        i8: "3",
        f: 1.5,
        n: "1.25",
        b: true,
        bf: false,
        t: "tx",
        z: null,
        j: { a: [1, null] },
        jb: { b: 2 },
        ai: [1, 2, null],
        at: ["a b", 'c"d', null, "NULL"],
        nested: [[1, 2], [3, 4]],
        empty: [],
        names: ["x", "y"],
        by: new Uint8Array([0, 255]),
        ts: new Date("2024-01-02T03:04:05Z"),
        u: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
      });
      assert.deepEqual(r.fields.map((f) => f.name).slice(0, 3), ["i2", "i4", "i8"]);
      assert.equal(r.command, "SELECT 1");
      assert.equal(r.rowCount, 1);
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: every backend message type of a session",
  async fn(t) {
    const notices: PgFields[] = [];
    const c = await open({ onNotice: (n) => notices.push(n), applicationName: "proto-test" });
    try {
      await t.step("BackendKeyData and startup ParameterStatus", async () => {
        const [r] = await c.execute([{ sql: "select pg_backend_pid() as pid" }]);
        assert.equal(r.rows[0].pid, c.processId);
        assert.equal(c.secretKey.length, 4);
        assert.equal(c.parameters.get("client_encoding"), "UTF8");
        assert.equal(c.parameters.get("application_name"), "proto-test");
        assert.match(c.parameters.get("server_version")!, /^15\./);
      });
      await t.step("ParameterStatus after SET", async () => {
        await c.execute([{ sql: "set application_name = 'changed'" }]);
        assert.equal(c.parameters.get("application_name"), "changed");
      });
      await t.step(
        "ParseComplete, BindComplete, RowDescription, DataRow, CommandComplete, NoData",
        async () => {
          const rs = await c.execute([
            { sql: "begin" },
            { sql: "insert into item values ($1, $2) ", params: [10, "ten"] },
            { sql: "select name from item where id = $1", params: [10] },
            { sql: "rollback" },
          ]);
          assert.deepEqual(rs.map((r) => r.command), [
            "BEGIN",
            "INSERT 0 1",
            "SELECT 1",
            "ROLLBACK",
          ]);
          assert.deepEqual(rs[2].rows, [{ name: "ten" }]);
          assert.deepEqual(rs[1].fields, []);
        },
      );
      await t.step("EmptyQueryResponse", async () => {
        const [r] = await c.execute([{ sql: "" }, { sql: "select 1 as one" }]);
        assert.equal(r.command, "");
        assert.deepEqual(r.rows, []);
      });
      await t.step("PortalSuspended, resumed with back-pressure", async () => {
        await c.execute([{ sql: "begin" }]);
        const sink = new JsonArraySink();
        const parts: string[] = [];
        const [first] = await c.execute([{
          sql: "select to_json(g) from generate_series(1, 7) g",
          maxRows: 3,
          sink,
          portal: "p1",
        }]);
        assert.equal(first.suspended, true);
        assert.equal(first.rowCount, 3);
        parts.push(new TextDecoder().decode(sink.take(false)));
        for (;;) {
          const more = await c.fetch("p1", 3, { sink });
          const done = !more.suspended;
          parts.push(new TextDecoder().decode(sink.take(done)));
          if (done) break;
        }
        sink.release();
        await c.execute([{ sql: "commit" }]);
        assert.deepEqual(parts, ["[1,2,3", ",4,5,6", ",7]"]);
        assert.deepEqual(JSON.parse(parts.join("")), [1, 2, 3, 4, 5, 6, 7]);
      });
      await t.step("ErrorResponse fields", async () => {
        const e1 = await c.execute([{ sql: "insert into item values (1, 'dup')" }]).catch((e) => e);
        assert.ok(e1 instanceof PgError);
        assert.equal(e1.code, "23505");
        assert.equal(e1.constraint_name, "item_pkey");
        assert.equal(e1.table_name, "item");
        assert.match(e1.detail!, /Key \(id\)=\(1\) already exists/);
        assert.equal(e1.severity, "ERROR");
        const e2 = await c.execute([{ sql: "insert into item (id) values (5)" }]).catch((e) => e);
        assert.equal(e2.code, "23502");
        assert.equal(e2.column_name, "name");
        const e3 = await c.execute([{ sql: "select boom()" }]).catch((e) => e);
        assert.deepEqual([e3.code, e3.message, e3.detail, e3.hint], [
          "RS418",
          "went wrong",
          "the detail",
          "the hint",
        ]);
        assert.match(e3.where, /PL\/pgSQL function boom\(\)/);
        const e4 = await c.execute([{ sql: "select * from nowhere" }]).catch((e) => e);
        assert.deepEqual([e4.code, e4.position], ["42P01", "15"]);
      });
      await t.step("a failure skips the rest of the batch; statementIndex names it", async () => {
        const e = await c.execute([
          { sql: "select 1" },
          { sql: "select 1/0" },
          { sql: "select 2" },
        ]).catch((x) => x);
        assert.deepEqual([e.code, e.statementIndex], ["22012", 1]);
        assert.equal(c.txStatus, "I");
      });
      await t.step("ReadyForQuery statuses I, T, E", async () => {
        await c.execute([{ sql: "begin" }]);
        assert.equal(c.txStatus, "T");
        await c.execute([{ sql: "select 1/0" }]).catch(() => {});
        assert.equal(c.txStatus, "E");
        const e = await c.execute([{ sql: "select 1" }]).catch((x) => x);
        assert.equal(e.code, "25P02");
        await c.execute([{ sql: "rollback" }]);
        assert.equal(c.txStatus, "I");
      });
      await t.step("NoticeResponse", async () => {
        await c.execute([{ sql: "do $$ begin raise notice 'hello %', 42; end $$" }]);
        assert.equal(notices.at(-1)?.message, "hello 42");
        assert.equal(notices.at(-1)?.severity, "NOTICE");
      });
      await t.step("NotificationResponse", async () => {
        const rs = await c.simple(
          "listen chan; notify chan, 'payload'; unlisten chan; select 7 as n",
        );
        assert.deepEqual(rs.at(-1)!.rows, [{ n: 7 }]);
      });
      await t.step("CopyInResponse is refused with CopyFail; the session continues", async () => {
        await c.simple("create temp table cp (a int)");
        for (
          const run of [
            () => c.simple("copy cp from stdin"),
            () => c.execute([{ sql: "copy cp from stdin" }]),
          ]
        ) {
          const e = await run().catch((x) => x);
          assert.ok(e instanceof PgError, String(e));
          assert.match(e.message, /not supported by svc's client/);
          const [r] = await c.execute([{ sql: "select 3 as n" }]);
          assert.deepEqual(r.rows, [{ n: 3 }]);
        }
      });
      await t.step("CopyOutResponse, CopyData, CopyDone are skipped", async () => {
        const rs = await c.simple(
          "copy (select g from generate_series(1,3) g) to stdout; select 4 as n",
        );
        assert.equal(rs[0].command, "COPY 3");
        assert.deepEqual(rs[1].rows, [{ n: 4 }]);
        const [r] = await c.execute([{ sql: "copy (select 1) to stdout" }]);
        assert.equal(r.command, "COPY 1");
      });
      await t.step(
        "simple protocol: a script stops at its first error, all rolled back",
        async () => {
          const e = await c.simple(
            "create temp table s1 (a int); select 1/0; create temp table s2 (a int)",
          )
            .catch((x) => x);
          assert.equal(e.code, "22012");
          const [r] = await c.execute([{
            sql:
              "select to_regclass('pg_temp.s1') is not null as s1, to_regclass('pg_temp.s2') is not null as s2",
          }]);
          assert.deepEqual(r.rows, [{ s1: false, s2: false }]); // one implicit transaction
        },
      );
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: one write per batch; named statements parsed once; query() coalesces a tick",
  async fn() {
    const port = Number(new URL(await db()).port);
    const proxy = pgProxy(port);
    const u = new URL(await db());
    u.port = String(proxy.port);
    const c = await Connection.connect(u.toString());
    try {
      const batch = () =>
        c.execute([
          { sql: "begin" },
          { sql: "select set_config('role', $1, true)", params: ["postgres"] },
          { sql: "select name from item where id = $1", params: [1] },
          { sql: "commit" },
        ]);
      proxy.reset();
      await batch();
      assert.deepEqual(proxy.counts, { bursts: 1, executes: 4, parses: 4 });
      proxy.reset();
      await batch();
      assert.deepEqual(proxy.counts, { bursts: 1, executes: 4, parses: 0 });
      proxy.reset();
      const qs = [
        c.query({ sql: "select 1" }),
        c.query({ sql: "select 2" }),
        c.query({ sql: "select 3" }),
      ];
      await Promise.all(qs);
      assert.deepEqual(proxy.counts.bursts, 1);
      assert.deepEqual(proxy.counts.executes, 3);
    } finally {
      await c.close();
      proxy.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: the statement cache is bounded; evicted statements are closed",
  async fn() {
    const c = await open({ maxStatements: 3 });
    const held = async () => {
      const [r] = await c.execute([{
        sql: "select count(*)::int as n from pg_prepared_statements",
        prepare: false,
      }]);
      return r.rows[0].n as number;
    };
    try {
      for (let i = 0; i < 10; i++) {
        const [r] = await c.execute([{ sql: `select $1::int + ${i} as n`, params: [1] }]);
        assert.equal(r.rows[0].n, 1 + i);
      }
      assert.ok(await held() <= 3, `${await held()} prepared`);
      assert.ok(c.preparedCount <= 3);
      // The same statement many times in one batch (prepared by its first occurrence).
      const rs = await c.execute(
        Array.from({ length: 5 }, (_, i) => ({ sql: "select $1::text as v", params: [`v${i}`] })),
      );
      assert.deepEqual(rs.map((r) => r.rows[0].v), ["v0", "v1", "v2", "v3", "v4"]);
      // A statement whose Parse was skipped (an earlier failure) is parsed again next time.
      await c.execute([{ sql: "select 1/0" }, { sql: "select 'fresh' as f" }]).catch(() => {});
      const [f] = await c.execute([{ sql: "select 'fresh' as f" }]);
      assert.deepEqual(f.rows, [{ f: "fresh" }]);
      // A statement that failed to parse is not kept.
      await c.execute([{ sql: "selec 1" }]).catch(() => {});
      const e = await c.execute([{ sql: "selec 1" }]).catch((x) => x);
      assert.equal(e.code, "42601");
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: a statement over 16 KiB of SQL runs unnamed, never kept prepared",
  async fn() {
    const c = await open();
    try {
      // A backend keeps a prepared statement's trees, which grow with its text (src/pg/connection.ts).
      const long = `select $1::int + 1 as n, '${"x".repeat(MAX_PREPARED_SQL)}' as pad`;
      assert.ok(long.length > MAX_PREPARED_SQL);
      for (let i = 0; i < 3; i++) {
        const [r] = await c.execute([{ sql: long, params: [1] }]);
        assert.equal(r.rows[0].n, 2);
      }
      assert.equal(c.preparedCount, 0);
      const [n] = await c.execute([{
        sql: "select count(*)::int as n from pg_prepared_statements",
        prepare: false,
      }]);
      assert.equal(n.rows[0].n, 0);
      // A short one is kept, as before.
      await c.execute([{ sql: "select $1::int as v", params: [1] }]);
      assert.equal(c.preparedCount, 1);
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: the statements kept prepared hold at most MAX_PREPARED_CHARS of SQL",
  async fn() {
    // Found by a hostile client: 2,800 distinct 11 KB reads grew each backend by ≈ 140 MB, within
    // the count limit (256) alone.
    const c = await open();
    try {
      const pad = "x".repeat(15_000); // under MAX_PREPARED_SQL: each one is prepared
      for (let i = 0; i < 100; i++) {
        const [r] = await c.execute([{
          sql: `select $1::int + ${i} as n, '${pad}' as p`,
          params: [1],
        }]);
        assert.equal(r.rows[0].n, 1 + i);
      }
      const [k] = await c.execute([{
        sql: "select count(*)::int as n, coalesce(sum(length(statement)), 0)::int as chars " +
          "from pg_prepared_statements",
        prepare: false,
      }]);
      const { n, chars } = k.rows[0] as { n: number; chars: number };
      assert.ok(chars <= MAX_PREPARED_CHARS, `${chars} characters kept`);
      assert.ok(n >= 60 && n < 100, `${n} kept`);
      assert.equal(c.preparedCount, n);
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: a statement whose first Bind failed is described on its next use",
  async fn() {
    const c = await open();
    try {
      // Parsed (ParseComplete) but the Bind fails on the parameter: no RowDescription came.
      const e = await c.execute([{ sql: "select $1::int + 1 as n", params: ["x"] }]).catch((x) =>
        x
      );
      assert.equal(e.code, "22P02");
      const [r] = await c.execute([{ sql: "select $1::int + 1 as n", params: ["41"] }]);
      assert.deepEqual(r.rows, [{ n: 42 }]);
      assert.equal(c.error, null);
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: maxStatements 0 prepares nothing, still one write per batch",
  async fn() {
    const port = Number(new URL(await db()).port);
    const proxy = pgProxy(port);
    const u = new URL(await db());
    u.port = String(proxy.port);
    const c = await Connection.connect(u.toString(), { maxStatements: 0 });
    try {
      for (let i = 0; i < 3; i++) {
        proxy.reset();
        const rs = await c.execute([
          { sql: "begin" },
          { sql: "select name from item where id = $1", params: [2] },
          { sql: "select count(*)::int as n from pg_prepared_statements" },
          { sql: "commit" },
        ]);
        assert.deepEqual(rs[1].rows, [{ name: "b" }]);
        assert.deepEqual(rs[2].rows, [{ n: 0 }]);
        assert.deepEqual(proxy.counts, { bursts: 1, executes: 4, parses: 4 });
      }
    } finally {
      await c.close();
      proxy.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: a prepared statement whose result type changed is prepared again",
  async fn() {
    await psql("create table if not exists shape (a int); insert into shape values (1)", "pgproto");
    const c = await open();
    try {
      const [r1] = await c.execute([{ sql: "select * from shape" }]);
      assert.deepEqual(r1.rows, [{ a: 1 }]);
      await psql("alter table shape add column b int default 2", "pgproto");
      const e = await c.execute([{ sql: "select * from shape" }]).catch((x) => x);
      assert.equal(e.code, "0A000");
      const [r2] = await c.execute([{ sql: "select * from shape" }]);
      assert.deepEqual(r2.rows, [{ a: 1, b: 2 }]);
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name:
    "protocol: parameters of every length and script arrive intact; NUL values are the server's 22021",
  async fn() {
    const c = await open();
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
        "x".repeat(70_000),
        "mixed ascii then 名前 then ascii",
      ];
      const rs = await c.execute(values.map((v) => ({
        sql: "select $1::text as v, octet_length($1::text) as n",
        params: [v],
      })));
      rs.forEach((r, i) => {
        assert.equal(r.rows[0].v, values[i]);
        assert.equal(r.rows[0].n, new TextEncoder().encode(values[i]).length);
      });
      const [ne] = await c.execute([{ sql: "select 'ünï' || $1::text as v", params: ["ß"] }]);
      assert.equal(ne.rows[0].v, "ünïß");
      const [typed] = await c.execute([{
        sql: "select $1::int as i, $2::bool as b, $3::json as j, $4::text as z",
        params: [7, true, { k: [1] }, null],
      }]);
      assert.deepEqual(typed.rows[0], { i: 7, b: true, j: { k: [1] }, z: null });
      // A NUL in a value reaches the server, which refuses it as any bad value.
      const nul = await c.execute([{ sql: "select $1::text", params: ["a\0b"] }]).catch((x) => x);
      assert.equal(nul.code, "22021");
      // A NUL in statement text is refused before anything is sent.
      await assert.rejects(() => c.execute([{ sql: "select 'a\0b'" }]), /NUL/);
      const [after] = await c.execute([{ sql: "select 1 as ok" }]);
      assert.deepEqual(after.rows, [{ ok: 1 }]);
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: a 24 MiB row, raw and decoded",
  async fn() {
    const c = await open();
    try {
      const n = 24 << 20;
      const sink = new JsonArraySink();
      await c.execute([{ sql: "select to_json(repeat('x', $1::int))", params: [n], sink }]);
      const out = sink.take(true);
      sink.release();
      assert.equal(out.length, n + 4);
      const [r] = await c.execute([{ sql: "select repeat('y', $1::int) as s", params: [n] }]);
      assert.equal((r.rows[0].s as string).length, n);
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: cancel stops a running statement; the connection stays usable",
  async fn() {
    const c = await open();
    try {
      const t0 = performance.now();
      const slow = c.execute([{ sql: "select pg_sleep(30)" }]).catch((x) => x);
      // Wait until the statement is running on the server.
      const watcher = await open();
      const deadline = Date.now() + 10_000;
      for (;;) {
        const [r] = await watcher.execute([{
          sql:
            "select count(*)::int as n from pg_stat_activity where pid = $1 and state = 'active'",
          params: [c.processId],
        }]);
        if (r.rows[0].n === 1 || Date.now() > deadline) break;
      }
      await watcher.close();
      await c.cancel();
      const e = await slow;
      assert.equal(e.code, "57014");
      assert.ok(performance.now() - t0 < 20_000);
      const [r] = await c.execute([{ sql: "select 1 as ok" }]);
      assert.deepEqual(r.rows, [{ ok: 1 }]);
    } finally {
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "protocol: a terminated backend fails every pending batch at once, never hangs",
  async fn() {
    const c = await open();
    const pending = [
      c.execute([{ sql: "select pg_sleep(30)" }]),
      c.execute([{ sql: "select 1" }]),
      c.query({ sql: "select 2" }),
    ];
    const all = Promise.allSettled(pending);
    const t0 = performance.now();
    await psql(`select pg_terminate_backend(${c.processId})`, "pgproto");
    const settled = await all;
    assert.ok(performance.now() - t0 < 10_000);
    for (const s of settled) {
      assert.equal(s.status, "rejected");
      const code = (s as PromiseRejectedResult).reason.code;
      assert.ok(code === "57P01" || code === "CONNECTION_CLOSED", code);
    }
    assert.ok(c.error);
    await assert.rejects(() => c.execute([{ sql: "select 1" }]));
    assert.ok(await c.closed());
  },
});

Deno.test({
  ...T,
  name: "protocol: connect failures are clear and bounded",
  async fn(t) {
    await t.step("refused", async () => {
      const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
      const port = (l.addr as Deno.NetAddr).port;
      l.close();
      const e = await Connection.connect(`postgres://x@127.0.0.1:${port}/x`).catch((x) => x);
      assert.ok(e instanceof PgConnectionError);
      assert.equal(e.code, "ECONNREFUSED");
    });
    await t.step("a server that never answers: CONNECT_TIMEOUT", async () => {
      const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
      const held: Deno.Conn[] = [];
      (async () => {
        for await (const x of l) held.push(x);
      })().catch(() => {});
      const t0 = performance.now();
      const e = await Connection.connect(
        `postgres://x@127.0.0.1:${(l.addr as Deno.NetAddr).port}/x`,
        { connectTimeoutMs: 300 },
      ).catch((x) => x);
      assert.equal(e.code, "CONNECT_TIMEOUT");
      assert.ok(performance.now() - t0 < 5000);
      l.close();
      for (const h of held) h.close();
    });
    await t.step("connect_timeout from the connection string", async () => {
      const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
      const held: Deno.Conn[] = [];
      (async () => {
        for await (const x of l) held.push(x);
      })().catch(() => {});
      const e = await Connection.connect(
        `postgres://x@127.0.0.1:${(l.addr as Deno.NetAddr).port}/x?connect_timeout=1`,
      ).catch((x) => x);
      assert.equal(e.code, "CONNECT_TIMEOUT");
      l.close();
      for (const h of held) h.close();
    });
    await t.step("unknown database: the server's error", async () => {
      const u = new URL(await db());
      u.pathname = "/nope";
      const e = await Connection.connect(u.toString()).catch((x) => x);
      assert.ok(e instanceof PgError);
      assert.equal(e.code, "3D000");
    });
    await t.step("startup options and application_name from the string", async () => {
      const u = new URL(await db());
      u.searchParams.set("application_name", "from-uri");
      u.searchParams.set("options", "-c statement_timeout=1234");
      u.searchParams.set("search_path", "pg_catalog");
      const c = await Connection.connect(u.toString());
      const [r] = await c.execute([{
        sql: "select current_setting('application_name') as a, " +
          "current_setting('statement_timeout') as s, current_setting('search_path') as p",
      }]);
      await c.close();
      assert.deepEqual(r.rows[0], { a: "from-uri", s: "1234ms", p: "pg_catalog" });
    });
  },
});

Deno.test({ ...T, name: "protocol: stop", fn: () => stopDb() });
