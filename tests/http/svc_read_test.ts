/**
 * Reads through real HTTP against Chinook: POST and GET forms, ComplexQuery flags and gates,
 * batches, error codes with pointers, streaming of a large result.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { postSvc, startServer } from "../helpers/server.ts";
import { NESTED_READ_BODY } from "../../bench/lib/cases.ts";

const uri = await chinookDb(
  "reads",
  `
  create table big (id int primary key, label text not null);
  insert into big select g, 'row ' || g from generate_series(1, 100000) g;
  grant select on big to "~anonymous";
  create function album_title_upper(a album) returns text language sql stable as $$ select upper(a.title) $$;
`,
);
const srv = await startServer(uri, ["--dev"]);
const locked = await startServer(uri, []); // allow_* off
const sql = sqlClient(uri);

const post = (body: unknown, s = srv) => postSvc(s, body);

const threeLevel = {
  relation: "artist",
  where: ["<=", "artist_id", 3],
  order_by: ["artist_id"],
  join: {
    albums: {
      relation: "album",
      on: { artist_id: "artist_id" },
      order_by: ["album_id"],
      join: {
        tracks: {
          relation: "track",
          on: { album_id: "album_id" },
          select: ["track_id", "name"],
          order_by: ["track_id"],
        },
      },
    },
  },
};

Deno.test("3-level read equals a hand-written reference query", async () => {
  const { status, body } = await post(threeLevel);
  assert.equal(status, 200);
  const ref = await sql<{ j: unknown }>`
    select json_build_object('artist_id', a.artist_id, 'name', a.name, 'albums', coalesce((
      select json_agg(json_build_object('album_id', al.album_id, 'title', al.title, 'artist_id', al.artist_id,
        'tracks', coalesce((select json_agg(json_build_object('track_id', t.track_id, 'name', t.name) order by t.track_id)
                  from track t where t.album_id = al.album_id), '[]'::json)) order by al.album_id)
      from album al where al.artist_id = a.artist_id), '[]'::json)) as j
    from artist a where a.artist_id <= 3 order by a.artist_id`;
  assert.deepEqual(body, ref.map((r) => r.j));
  assert.equal(
    (body as { albums: { tracks: unknown[] }[] }[])[0].albums[0].tracks.length,
    10,
  );
});

Deno.test("GET form gives identical JSON to POST", async () => {
  const pairs: [string, unknown][] = [
    [
      "relation=artist&where=lte(artist_id,3)&order_by=artist_id&join.albums.relation=album&join.albums.on.artist_id=artist_id&join.albums.order_by=album_id&join.albums.join.tracks.relation=track&join.albums.join.tracks.on.album_id=album_id&join.albums.join.tracks.select=track_id,name&join.albums.join.tracks.order_by=track_id",
      threeLevel,
    ],
    [
      "relation=track&select=track_id,name&where=and(gte(milliseconds,300000),like(name,'A%25'))&order_by=-milliseconds&limit=5",
      {
        relation: "track",
        select: ["track_id", "name"],
        where: ["and", [">=", "milliseconds", 300000], ["like", "name", ["A%"]]],
        order_by: [["desc", "milliseconds"]],
        limit: 5,
      },
    ],
    [
      "relation=genre&where=in(genre_id,1,2,3)&select=own",
      { relation: "genre", where: ["in", "genre_id", 1, 2, 3], select: "own" },
    ],
  ];
  for (const [qs, tree] of pairs) {
    const g = await srv.get(`/svc?${qs}`);
    assert.equal(g.status, 200, qs);
    assert.deepEqual(await g.json(), (await post(tree)).body, qs);
  }
});

Deno.test("operators: like/ilike/in/between/is_not_null/@> and a computed field", async () => {
  const r = await post({
    relation: "track",
    select: ["track_id"],
    where: ["and", ["ilike", "name", ["%love%"]], ["between", 200000, "milliseconds", 300000], [
      "is_not_null",
      "composer",
    ], ["in", "genre_id", 1, 3]],
    order_by: ["track_id"],
  });
  assert.equal(r.status, 200);
  const ref =
    await sql`select track_id from track where name ilike '%love%' and milliseconds between 200000 and 300000
    and composer is not null and genre_id in (1,3) order by track_id`;
  assert.deepEqual(r.body, ref.map((x) => ({ track_id: x.track_id })));
  const c = await post({
    relation: "album",
    select: ["album_id", "album_title_upper"],
    where: ["=", "album_id", 1],
  });
  assert.deepEqual(c.body, [{
    album_id: 1,
    album_title_upper: "FOR THOSE ABOUT TO ROCK WE SALUTE YOU",
  }]);
  const arr = await post({
    relation: "album",
    select: ["album_id"],
    where: ["@>", ["arr", "album_id", "artist_id"], ["arr", 1]],
    order_by: ["album_id"],
    limit: 2,
  });
  assert.deepEqual(arr.body, [{ album_id: 1 }, { album_id: 4 }]);
});

Deno.test("joins: outward to two parents, self-join both ways, agg with and without filter, distinct_on", async () => {
  const il = await post({
    relation: "invoice_line",
    where: ["=", "invoice_line_id", 1],
    select: ["invoice_line_id", "invoice", "track"],
    join: {
      invoice: {
        relation: "invoice",
        on: { invoice_id: "invoice_id" },
        select: ["invoice_id", "total"],
      },
      track: { relation: "track", on: { track_id: "track_id" }, select: ["name"] },
    },
  });
  assert.deepEqual(il.body, [{
    invoice_line_id: 1,
    invoice: { invoice_id: 1, total: 1.98 },
    track: { name: "Balls to the Wall" },
  }]);
  const emp = await post({
    relation: "employee",
    alias: "e",
    where: ["=", "employee_id", 2],
    select: ["employee_id", "manager", "reports"],
    join: {
      manager: { relation: "employee", on: { employee_id: "reports_to" }, select: ["employee_id"] },
      reports: {
        relation: "employee",
        on: { reports_to: "employee_id" },
        select: ["employee_id"],
        order_by: ["employee_id"],
      },
    },
  });
  assert.deepEqual(emp.body, [{
    employee_id: 2,
    manager: { employee_id: 1 },
    reports: [{ employee_id: 3 }, { employee_id: 4 }, { employee_id: 5 }],
  }]);
  const top = await post({
    relation: "employee",
    where: ["=", "employee_id", 1],
    select: ["employee_id", "manager"],
    join: { manager: { relation: "employee", on: { employee_id: "reports_to" } } },
  });
  assert.deepEqual(top.body, [{ employee_id: 1, manager: null }]);
  const agg = await post({
    relation: "album",
    where: ["=", "album_id", 1],
    select: {
      id: "album_id",
      n: ["agg", "count", ["tracks"]],
      long: ["agg", "count", ["tracks"], [">", "milliseconds", 300000]],
    },
    join: { tracks: { relation: "track", on: { album_id: "album_id" } } },
  });
  assert.deepEqual(agg.body, [{ id: 1, n: 10, long: 1 }]);
  const d = await post({
    relation: "track",
    select: ["genre_id", "track_id"],
    distinct_on: ["genre_id"],
    order_by: ["genre_id", "track_id"],
    limit: 3,
  });
  assert.deepEqual(d.body, [{ genre_id: 1, track_id: 1 }, { genre_id: 2, track_id: 63 }, {
    genre_id: 3,
    track_id: 77,
  }]);
});

Deno.test("ComplexQuery: count with offset/limit echo, sql, query_plan, returns none, rollback", async () => {
  const r = await post({
    query: {
      relation: "album",
      where: ["=", "artist_id", 90],
      limit: 2,
      offset: 1,
      order_by: ["album_id"],
    },
    count: true,
    sql: true,
    query_plan: true,
  });
  assert.equal(r.status, 200);
  assert.equal(r.body.count, 21);
  assert.equal(r.body.offset, 1);
  assert.equal(r.body.limit, 2);
  assert.equal(r.body.result.length, 2);
  assert.equal(r.body.sql.length, 1);
  assert.deepEqual(r.body.sql[0].path, []);
  assert.match(r.body.sql[0].select, /^SELECT /);
  assert.ok(r.body.query_plan[0].Plan, "EXPLAIN JSON");
  const noLimit = await post({ query: { relation: "genre" }, count: true });
  assert.deepEqual(Object.keys(noLimit.body).sort(), ["count", "offset", "result"]);
  assert.equal(noLimit.body.offset, 0);
  const none = await post({ query: { relation: "genre" }, returns: "none", count: true });
  assert.deepEqual(none.body, { count: 25, offset: 0 });
  const rb = await post({ query: { relation: "genre", limit: 1 }, rollback: true });
  assert.deepEqual(rb.body, [{ genre_id: 1, name: "Rock" }]);
});

Deno.test("ComplexQuery errors and gates", async () => {
  const cases: [unknown, string, number][] = [
    [{ query: { relation: "genre" }, returns: "none" }, "QUERY_UNSUPPORTED_RETURNS", 400],
    [{ query: { relation: "genre" }, data: [], count: true }, "QUERY_COUNT_IS_READ_ONLY", 400],
    [{ query: { relation: "genre" }, stats: true }, "QUERY_STATS_IS_WRITE_ONLY", 400],
    [
      {
        query: { relation: "genre", select: ["genre_id", "name"] },
        data: [],
        stats: true,
        query_plan: true,
      },
      "QUERY_STATS_QUERY_PLAN_CONFLICT",
      400,
    ],
  ];
  for (const [body, code, status] of cases) {
    const r = await post(body);
    assert.equal(r.code, code);
    assert.equal(r.status, status);
    assert.equal(r.body.code, code);
  }
  const rb = await post({ query: { relation: "genre" }, rollback: true }, locked);
  assert.equal(rb.status, 403);
  assert.equal(rb.code, "QUERY_ROLLBACK_NOT_GRANTED");
  const gated = await post({
    query: { relation: "genre", limit: 2 },
    count: true,
    sql: true,
    query_plan: true,
  }, locked);
  assert.equal(gated.status, 200);
  assert.equal(gated.body.count, undefined);
  assert.equal(gated.body.offset, undefined, "offset goes with count");
  assert.equal(gated.body.limit, 2);
  assert.deepEqual(gated.body.sql, []);
  assert.deepEqual(gated.body.query_plan, []);
  assert.equal(gated.body.result.length, 2);
  // Disabled flags are named in `warnings`, never silently dropped.
  assert.deepEqual(gated.body.warnings, [
    "count is disabled (pg.query.allow_count)",
    "query_plan is disabled (pg.query.allow_query_plan)",
    "sql is disabled (pg.query.allow_sql)",
  ]);
  const allowed = await post({ query: { relation: "genre", limit: 1 }, count: true });
  assert.equal(allowed.body.warnings, undefined, "no warnings when every flag is allowed");
  assert.equal(allowed.body.offset, 0);
  assert.equal(typeof allowed.body.count, "number");
  const g = await srv.get("/svc?relation=genre&count=true");
  assert.equal(g.status, 400);
  assert.equal(g.headers.get("x-svc-errorcode"), "QUERY_COMPLEX_NOT_ALLOWED_ON_GET");
  await g.body?.cancel();
  const u = await srv.get("/svc?relation=genre&bogus=1");
  assert.equal(u.headers.get("x-svc-errorcode"), "QUERY_INVALID");
  await u.body?.cancel();
  const m = await fetch(`${srv.url}/svc`, { method: "DELETE" });
  assert.equal(m.status, 405);
  assert.equal(m.headers.get("x-svc-errorcode"), "QUERY_METHOD_NOT_ALLOWED");
  await m.body?.cancel();
});

Deno.test("GET nested past http.max_json_depth: 400 with its limit, never a 500", async () => {
  // 10,000 open calls overflowed the where parser's stack (500 INTERNAL); thousands of nested
  // joins cost quadratic work before the depth limit of the compiler saw them.
  for (
    const qs of [
      `relation=artist&where=${"not(".repeat(10_000)}`,
      `relation=artist&where=${"not(".repeat(3000)}eq(artist_id,1)${")".repeat(3000)}`,
      `relation=artist&${"join.a.".repeat(6000)}relation=artist`,
    ]
  ) {
    const r = await srv.get(`/svc?${qs}`);
    const body = await r.json();
    assert.equal(r.status, 400, JSON.stringify(body).slice(0, 300));
    assert.equal(body.code, "QUERY_INVALID");
    assert.equal(body.details.limit, "http.max_json_depth");
  }
  // Bytes that are not UTF-8 were decoded to U+FFFD (404 unknown relation '��'); a body is strict.
  const bad = await srv.get("/svc?relation=%ff%fe");
  assert.equal(bad.status, 400);
  assert.equal(bad.headers.get("x-svc-errorcode"), "QUERY_INVALID");
  await bad.body?.cancel();
  const ok = await srv.get("/svc?relation=artist&where=not(not(gt(artist_id,274)))&select=name");
  assert.deepEqual(await ok.json(), [{ name: "Philip Glass Ensemble" }]);
});

Deno.test("bad input: code, status and JSON pointer, never a 500", async () => {
  const cases: [unknown, string, number, string | null][] = [
    ["{not json", "QUERY_INVALID", 400, ""],
    [{ relation: "nope" }, "QUERY_UNKNOWN_RELATION", 404, "/relation"],
    [{ relation: "pg_class", schema: "pg_catalog" }, "QUERY_UNKNOWN_RELATION", 404, null],
    [{ relation: "album", select: ["nope"] }, "QUERY_UNKNOWN_COLUMN", 400, "/select/0"],
    [{ relation: "album", where: ["=", "title"] }, "QUERY_INVALID", 400, "/where"],
    [
      { relation: "album", join: { a: { relation: "track", on: { name: "title" } } } },
      "QUERY_BAD_JOIN",
      400,
      "/join/a/on",
    ],
    [{ function: "pg_sleep", arguments: [1] }, "QUERY_UNKNOWN_RELATION", 404, null],
    [
      { relation: "track", distinct_on: ["genre_id"], order_by: ["track_id"] },
      "QUERY_DISTINCT_ON_NOT_PREFIX",
      400,
      null,
    ],
  ];
  for (const [body, code, status, pointer] of cases) {
    const r = await post(body);
    assert.equal(r.code, code, JSON.stringify(body));
    assert.equal(r.status, status, JSON.stringify(body));
    if (pointer !== null) assert.equal(r.body.details.pointer, pointer, JSON.stringify(r.body));
  }
  let deep: Record<string, unknown> = { relation: "employee" };
  const root = deep;
  for (let i = 0; i < 8; i++) {
    const child: Record<string, unknown> = {
      relation: "employee",
      on: { reports_to: "employee_id" },
    };
    deep.join = { r: child };
    deep = child;
  }
  const d = await post(root);
  assert.equal(d.code, "QUERY_MAX_DEPTH_EXCEEDED");
  assert.equal(d.status, 400);
});

Deno.test("batches run in one transaction; the first error reports its index", async () => {
  const ok = await post([{ relation: "genre", limit: 1 }, {
    query: { relation: "media_type", limit: 1 },
    count: true,
  }]);
  assert.equal(ok.status, 200);
  assert.deepEqual(ok.body[0], [{ genre_id: 1, name: "Rock" }]);
  assert.equal(ok.body[1].count, 5);
  const bad = await post([{ relation: "genre", limit: 1 }, { relation: "nope" }]);
  assert.equal(bad.code, "QUERY_UNKNOWN_RELATION");
  assert.equal(bad.body.details.index, 1);
});

Deno.test("streams 100,000 rows as one JSON array", async () => {
  const res = await srv.post("/svc", { relation: "big", order_by: ["id"] });
  assert.equal(res.status, 200);
  const rows = await res.json();
  assert.equal(rows.length, 100000);
  assert.deepEqual(rows[99999], { id: 100000, label: "row 100000" });
  const empty = await post({ relation: "big", where: ["<", "id", 0] });
  assert.deepEqual(empty.body, []);
});

Deno.test("clients that disconnect mid-stream give their connections back", async () => {
  for (let i = 0; i < 6; i++) { // more than the pool's 4 connections
    const ac = new AbortController();
    const res = await fetch(`${srv.url}/svc`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ relation: "big", order_by: ["id"] }),
      signal: ac.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    ac.abort();
    await reader.cancel().catch(() => {});
  }
  const r = await post({ relation: "genre", limit: 1 });
  assert.equal(r.status, 200);
  assert.deepEqual(r.body, [{ genre_id: 1, name: "Rock" }]);
});

Deno.test("concurrent answers of many sizes each come whole and unmixed, run after run", async () => {
  // Answers over 16 KiB are built in buffers reused between requests (src/http/json_body.ts):
  // each response must still be exactly its own answer, whatever ran beside it.
  const reads = [3, 8, 20, 40, 1].map((n) => ({
    ...NESTED_READ_BODY,
    where: ["<=", "artist_id", n],
  }));
  const want: string[] = [];
  for (const q of reads) want.push(await (await srv.post("/svc", q)).text());
  assert.ok(want.filter((t) => t.length > 16384).length >= 3, "several answers over 16 KiB");
  for (let round = 0; round < 4; round++) {
    const order = Array.from({ length: 40 }, (_, i) => (i * 7 + round) % reads.length);
    const got = await Promise.all(order.map(async (k) => {
      const res = await srv.post("/svc", reads[k]);
      assert.equal(res.status, 200);
      return await res.text();
    }));
    got.forEach((t, i) => assert.equal(t, want[order[i]], `round ${round}, request ${i}`));
  }
});

Deno.test("teardown", async () => {
  await sql.end();
  await srv.stop();
  await locked.stop();
  await stopDb();
});
