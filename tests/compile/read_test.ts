import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, schemaOf, stopDb } from "../helpers/db.ts";
import { FIXTURE_SQL, rowsOf } from "./fixture.ts";
import { type ParseOptions, parseQuery } from "../../src/compile/parse.ts";
import { compileRead, shapeKey } from "../../src/compile/sql.ts";
import type { CompileOptions } from "../../src/compile/ast.ts";

const uri = await chinookDb("reads", FIXTURE_SQL);
const schema = await schemaOf(uri);
const sql = sqlClient(uri);

/** Parses, compiles and runs a read; returns the parsed row objects. */
async function read(
  tree: unknown,
  opts: CompileOptions = {},
  popts: Partial<ParseOptions> = {},
): Promise<Record<string, unknown>[]> {
  const node = parseQuery(schema, tree, { maxDepth: 6, ...popts });
  return await rowsOf(sql, compileRead(node, opts).rows) as Record<string, unknown>[];
}

/** Runs reference SQL producing json rows in column j. */
async function reference(text: string): Promise<unknown[]> {
  return (await sql.unsafe(text)).map((r) => r.j);
}

/** The values of one key of every row. */
function col(rows: Record<string, unknown>[], key: string): unknown[] {
  return rows.map((r) => r[key]);
}

Deno.test("3-level read artist → albums → tracks equals the reference SQL", async () => {
  const rows = await read({
    relation: "artist",
    where: ["<=", "artist_id", 30],
    order_by: ["artist_id"],
    join: {
      albums: {
        relation: "album",
        on: { artist_id: "artist_id" },
        select: ["album_id", "title", "tracks"],
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
  });
  const expected = await reference(`
    select json_build_object('artist_id', a.artist_id, 'name', a.name, 'albums',
      coalesce((select json_agg(json_build_object('album_id', al.album_id, 'title', al.title,
        'tracks', coalesce((select json_agg(json_build_object('track_id', t.track_id, 'name', t.name)
                            order by t.track_id) from track t where t.album_id = al.album_id), '[]'))
        order by al.album_id) from album al where al.artist_id = a.artist_id), '[]')) as j
    from artist a where a.artist_id <= 30 order by a.artist_id`);
  assert.equal(rows.length, 30);
  assert.deepEqual(rows, expected);
  assert.deepEqual(Object.keys(rows[0]), ["artist_id", "name", "albums"]);
  const empty = rows.find((r) => (r.albums as unknown[]).length === 0);
  assert.ok(empty, "an artist without albums yields []");
});

Deno.test("invoice_line joined outward to invoice and track (objects), '.' reaches into them", async () => {
  const rows = await read({
    relation: "invoice_line",
    where: ["and", ["=", [".", "invoice", "customer_id"], 2], [
      ">",
      [".", "track", "milliseconds"],
      0,
    ]],
    select: {
      id: "invoice_line_id",
      track_name: [".", "track", "name"],
      invoice: "invoice",
      track: "track",
    },
    order_by: ["invoice_line_id"],
    join: {
      invoice: {
        relation: "invoice",
        on: { invoice_id: "invoice_id" },
        select: ["invoice_id", "customer_id"],
      },
      track: { relation: "track", on: { track_id: "track_id" }, select: ["track_id", "name"] },
    },
  });
  const expected = await reference(`
    select json_build_object('id', il.invoice_line_id, 'track_name', t.name,
      'invoice', json_build_object('invoice_id', i.invoice_id, 'customer_id', i.customer_id),
      'track', json_build_object('track_id', t.track_id, 'name', t.name)) as j
    from invoice_line il join invoice i using (invoice_id) join track t using (track_id)
    where i.customer_id = 2 order by il.invoice_line_id`);
  assert.ok(rows.length > 5);
  assert.deepEqual(rows, expected);
});

Deno.test("employee self-join both ways: manager object (null at the top), reports array", async () => {
  const rows = await read({
    relation: "employee",
    alias: "e",
    select: ["employee_id", "manager", "reports"],
    order_by: ["employee_id"],
    join: {
      manager: {
        relation: "employee",
        on: { employee_id: "reports_to" },
        select: ["employee_id", "last_name"],
      },
      reports: {
        relation: "employee",
        alias: "r",
        on: { reports_to: "employee_id" },
        select: ["employee_id"],
        order_by: ["employee_id"],
      },
    },
  });
  const node = parseQuery(schema, {
    relation: "employee",
    join: {
      manager: { relation: "employee", on: { employee_id: "reports_to" } },
      reports: { relation: "employee", on: { reports_to: "employee_id" } },
    },
  }, { maxDepth: 6 });
  assert.equal(node.joins[0].direction, "outgoing");
  assert.equal(node.joins[0].nullable, true);
  assert.equal(node.joins[1].direction, "incoming");
  const expected = await reference(`
    select json_build_object('employee_id', e.employee_id,
      'manager', (select json_build_object('employee_id', m.employee_id, 'last_name', m.last_name)
                  from employee m where m.employee_id = e.reports_to),
      'reports', coalesce((select json_agg(json_build_object('employee_id', r.employee_id) order by r.employee_id)
                  from employee r where r.reports_to = e.employee_id), '[]')) as j
    from employee e order by e.employee_id`);
  assert.deepEqual(rows, expected);
  assert.equal(rows[0].manager, null);
  assert.ok((rows[0].reports as unknown[]).length > 0);
});

Deno.test("agg count with and without filter; sum/min/max/array_agg/bool_or", async () => {
  const rows = await read({
    relation: "album",
    where: ["<=", "album_id", 5],
    order_by: ["album_id"],
    select: {
      album_id: "album_id",
      n: ["agg", "count", ["tracks"]],
      long: ["agg", "count", ["tracks"], [">", "milliseconds", 300000]],
      total_ms: ["agg", "sum", ["tracks", "milliseconds"]],
      shortest: ["agg", "min", ["tracks", "milliseconds"]],
      longest: ["agg", "max", ["tracks", "milliseconds"]],
      ids: ["agg", "array_agg", ["tracks", "track_id"]],
      any_long: ["agg", "bool_or", ["tracks", [">", "milliseconds", 300000]]],
    },
    join: { tracks: { relation: "track", on: { album_id: "album_id" } } },
  });
  const expected = await sql<Record<string, number>>`
    select album_id, count(*)::int as n, (count(*) filter (where milliseconds > 300000))::int as long,
      sum(milliseconds)::int as total_ms, min(milliseconds) as shortest, max(milliseconds) as longest
    from track where album_id <= 5 group by album_id order by album_id`;
  assert.deepEqual(col(rows, "n"), expected.map((r) => r.n));
  assert.deepEqual(col(rows, "long"), expected.map((r) => r.long));
  assert.deepEqual(col(rows, "total_ms"), expected.map((r) => r.total_ms));
  assert.deepEqual(col(rows, "shortest"), expected.map((r) => r.shortest));
  assert.deepEqual(col(rows, "longest"), expected.map((r) => r.longest));
  assert.deepEqual(col(rows, "any_long"), expected.map((r) => r.long > 0));
  assert.equal((rows[0].ids as number[]).length, expected[0].n);
  // agg in where: artists with more than 10 albums
  const many = await read({
    relation: "artist",
    select: ["artist_id"],
    where: [">", ["agg", "count", ["albums"]], 10],
    join: { albums: { relation: "album", on: { artist_id: "artist_id" } } },
    order_by: ["artist_id"],
  });
  const ref =
    await sql`select artist_id from album group by artist_id having count(*) > 10 order by 1`;
  assert.deepEqual(col(many, "artist_id"), ref.map((r) => r.artist_id));
});

Deno.test("distinct_on: first album per artist by title, at the root and in a join", async () => {
  const rows = await read({
    relation: "album",
    select: ["artist_id", "title"],
    distinct_on: ["artist_id"],
    order_by: ["artist_id", "title"],
    limit: 5,
  });
  const ref =
    await sql`select distinct on (artist_id) artist_id, title from album order by artist_id, title limit 5`;
  assert.deepEqual(rows, ref.map((r) => ({ artist_id: r.artist_id, title: r.title })));
  const nested = await read({
    relation: "artist",
    select: ["artist_id", "genres"],
    where: ["=", "artist_id", 1],
    join: {
      genres: {
        relation: "album",
        on: { artist_id: "artist_id" },
        select: ["album_id"],
        distinct_on: [["agg", "count", ["tracks"]]],
        order_by: [["agg", "count", ["tracks"]], "album_id"],
        join: { tracks: { relation: "track", on: { album_id: "album_id" } } },
      },
    },
  });
  assert.equal(nested.length, 1);
  assert.ok((nested[0].genres as unknown[]).length >= 1);
});

Deno.test("operators: like, ilike, in, not_in, between, is_null, @> with arr, regex, jsonb, arithmetic", async () => {
  const ids = async (where: unknown, relation = "track", key = "track_id") =>
    col(await read({ relation, where, select: [key], order_by: [key] }), key);
  const refIds = async (q: string) => (await sql.unsafe(q)).map((r) => Object.values(r)[0]);
  assert.deepEqual(
    await ids(["like", "name", ["Put%"]]),
    await refIds(`select track_id from track where name like 'Put%' order by 1`),
  );
  assert.deepEqual(
    await ids(["ilike", "name", ["put%"]]),
    await refIds(`select track_id from track where name ilike 'put%' order by 1`),
  );
  assert.deepEqual(
    await ids(["not_like", "name", ["%a%"]]),
    await refIds(`select track_id from track where name not like '%a%' order by 1`),
  );
  assert.deepEqual(await ids(["in", "track_id", 3, 1, 2]), [1, 2, 3]);
  assert.deepEqual(await ids(["in", "track_id", ["arr", 5, 4]]), [4, 5]);
  assert.deepEqual(
    await ids(["and", ["not_in", "genre_id", 1, 2, 3], ["<", "track_id", 300]]),
    await refIds(
      `select track_id from track where genre_id not in (1,2,3) and track_id < 300 order by 1`,
    ),
  );
  assert.deepEqual(
    await ids(["between", 200000, "milliseconds", 201000]),
    await refIds(
      `select track_id from track where milliseconds between 200000 and 201000 order by 1`,
    ),
  );
  assert.deepEqual(
    await ids(["and", ["is_not_null", "composer"], ["<", "track_id", 20]]),
    await refIds(
      `select track_id from track where composer is not null and track_id < 20 order by 1`,
    ),
  );
  assert.deepEqual(
    await ids(["and", ["is_null", "composer"], ["<", "track_id", 100]]),
    await refIds(`select track_id from track where composer is null and track_id < 100 order by 1`),
  );
  assert.deepEqual(
    await ids(["or", ["~", "name", ["^Z"]], ["~*", "name", ["^zo"]]]),
    await refIds(`select track_id from track where name ~ '^Z' or name ~* '^zo' order by 1`),
  );
  assert.deepEqual(
    await ids(["not", [">=", ["/", "milliseconds", 1000], 30]]),
    await refIds(`select track_id from track where not (milliseconds / 1000 >= 30) order by 1`),
  );
  assert.deepEqual(
    await ids(["=", ["||", "name", ["!"]], ["Dog Eat Dog!"]]),
    await refIds(`select track_id from track where name || '!' = 'Dog Eat Dog!' order by 1`),
  );
  assert.deepEqual(
    await ids(["is_distinct_from", "composer", null]),
    await refIds(`select track_id from track where composer is not null order by 1`),
  );
  assert.deepEqual(await ids(["@>", "tags", ["arr", ["rock"]]], "doc", "id"), [1]);
  assert.deepEqual(await ids(["&&", "tags", ["arr", ["jazz"], ["rock"]]], "doc", "id"), [1, 2]);
  assert.deepEqual(await ids(["<@", "tags", ["{jazz,blues}"]], "doc", "id"), [2, 3]);
  assert.deepEqual(await ids(["@>", "meta", ['{"pages": 3}']], "doc", "id"), [2]);
  assert.deepEqual(await ids(["=", ["->>", "meta", ["lang"]], ["en"]], "doc", "id"), [1]);
  assert.deepEqual(await ids([">", ["cast", ["->", "meta", ["pages"]], "int"], 5], "doc", "id"), [
    1,
  ]);
  assert.deepEqual(await ids([">", "created", ["2023-12-31"]], "doc", "id"), [1, 2, 3]);
  assert.deepEqual(
    await ids(["<", "created", ["cast", ["2024-01-01 09:00:00+00"], "timestamptz"]], "doc", "id"),
    [],
  );
});

Deno.test("function-rooted queries: fts search function, scalar and table functions", async () => {
  const found = await read({
    function: "search_docs",
    arguments: { q: ["guitars OR saxophones"] },
    select: ["id", "title", "track"],
    order_by: ["id"],
    join: { track: { relation: "track", on: { track_id: "track_id" }, select: ["name"] } },
  });
  assert.deepEqual(col(found, "id"), [1, 2]);
  assert.deepEqual(found[0].track, { name: "For Those About To Rock (We Salute You)" });
  const positional = await read({
    function: "search_docs",
    arguments: [["music"], ["simple"]],
    select: ["id"],
    where: ["fts", "search", ["classical"], ["english"]],
  });
  assert.deepEqual(positional, [{ id: 3 }]);
  const direct = await read({
    relation: "doc",
    select: ["id"],
    where: ["fts", "search", ["-jazz music"]],
  });
  assert.deepEqual(direct.map((r) => r.id).sort(), [1, 3]);
  assert.deepEqual(await read({ function: "answer" }), [{ answer: 42 }]);
  const long = await read({
    function: "long_tracks",
    arguments: [1000000],
    where: ["<", "ms", 1100000],
    order_by: [["desc", "ms"]],
    limit: 2,
  });
  const ref = await sql`select track_id as id, name, milliseconds as ms from track
    where milliseconds >= 1000000 and milliseconds < 1100000 order by milliseconds desc limit 2`;
  assert.deepEqual(long, ref.map((r) => ({ ...r })));
});

Deno.test("computed fields (scalar and set-returning), composite fields via '.', enum column", async () => {
  const emp = await read({
    relation: "employee",
    select: ["employee_id", "full_name"],
    where: ["like", "full_name", ["%Adams"]],
  });
  assert.deepEqual(emp, [{ employee_id: 1, full_name: "Andrew Adams" }]);
  const tracks = await read({
    relation: "track",
    select: { id: "track_id", min: "minutes" },
    where: ["=", "track_id", 1],
  });
  assert.deepEqual(tracks, [{ id: 1, min: 5.73 }]);
  const docs = await read({
    relation: "doc",
    select: {
      id: "id",
      city: [".", "home", "city"],
      lat: [".", [".", "home", "pos"], "lat"],
      words: "words",
      feeling: "feeling",
      home: "home",
    },
    where: ["in", "feeling", ["happy"], ["ok"]],
    order_by: [["desc", "feeling"]],
  });
  assert.deepEqual(docs, [
    {
      id: 1,
      city: "London",
      lat: 51.5,
      words: ["Rock", "music", "history"],
      feeling: "happy",
      home: { street: "1 Main St", city: "London", pos: { lat: 51.5, lng: -0.12 } },
    },
    {
      id: 2,
      city: "Paris",
      lat: 48.8,
      words: ["Jazz", "standards"],
      feeling: "ok",
      home: { street: "2 High St", city: "Paris", pos: { lat: 48.8, lng: 2.35 } },
    },
  ]);
  const enumCmp = await read({
    relation: "doc",
    select: ["id"],
    where: [">", "feeling", ["sad"]],
    order_by: ["id"],
  });
  assert.deepEqual(enumCmp, [{ id: 1 }, { id: 2 }]);
  const byField = await read({
    relation: "doc",
    select: ["id"],
    where: ["=", [".", "home", "city"], ["Paris"]],
  });
  assert.deepEqual(byField, [{ id: 2 }]);
});

Deno.test("select forms: full, own, array with own and a join, object with get/set, literals", async () => {
  const join = {
    albums: {
      relation: "album",
      on: { artist_id: "artist_id" },
      select: "own",
      order_by: ["album_id"],
    },
  };
  const where = ["=", "artist_id", 1];
  const full = await read({ relation: "artist", where, join });
  assert.deepEqual(Object.keys(full[0]), ["artist_id", "name", "albums"]);
  assert.deepEqual(Object.keys((full[0].albums as Record<string, unknown>[])[0]), [
    "album_id",
    "title",
    "artist_id",
  ]);
  assert.deepEqual(
    Object.keys((await read({ relation: "artist", where, join, select: "own" }))[0]),
    [
      "artist_id",
      "name",
    ],
  );
  assert.deepEqual(
    Object.keys((await read({ relation: "artist", where, join, select: ["albums", "own"] }))[0]),
    [
      "albums",
      "artist_id",
      "name",
    ],
  );
  const obj = await read({
    relation: "artist",
    where,
    join,
    select: {
      n: "name",
      id: ["get", "artist_id"],
      hidden: ["set", "name"],
      a: ["get", "albums"],
      s: ["hello"],
      i: 5,
      big: 5000000000,
      f: 1.5,
      b: true,
      z: null,
      sum: ["+", "artist_id", 1],
      c: ["cast", 7, "text"],
    },
  });
  assert.deepEqual(Object.keys(obj[0]), [
    "n",
    "id",
    "a",
    "s",
    "i",
    "big",
    "f",
    "b",
    "z",
    "sum",
    "c",
  ]);
  assert.deepEqual({ ...obj[0], a: null }, {
    n: "AC/DC",
    id: 1,
    a: null,
    s: "hello",
    i: 5,
    big: 5000000000,
    f: 1.5,
    b: true,
    z: null,
    sum: 2,
    c: "7",
  });
});

Deno.test("a wide relation (over 50 outputs) keeps key order", async () => {
  const rows = await read({ relation: "wide", order_by: ["id"] });
  assert.equal(rows.length, 2);
  assert.deepEqual(Object.keys(rows[0]), [
    "id",
    ...Array.from({ length: 60 }, (_, i) => `c${i + 1}`),
  ]);
  assert.equal(rows[1].c60, 60);
});

Deno.test("count statement ignores limit/offset, honours where and distinct_on", async () => {
  const node = parseQuery(schema, {
    relation: "track",
    where: ["=", "genre_id", 1],
    limit: 3,
    offset: 2,
    join: { album: { relation: "album", on: { album_id: "album_id" } } },
  }, { maxDepth: 6 });
  const c = compileRead(node, { count: true });
  assert.equal((await rowsOf(sql, c.rows)).length, 3);
  const [{ count }] = await sql.unsafe(c.count!.sql, c.count!.params as never[]);
  const [{ n }] = await sql`select count(*) as n from track where genre_id = 1`;
  assert.equal(count, n);
  const d = compileRead(
    parseQuery(schema, { relation: "album", distinct_on: ["artist_id"], order_by: ["artist_id"] }, {
      maxDepth: 6,
    }),
    { count: true },
  );
  const [{ count: dc }] = await sql.unsafe(d.count!.sql, d.count!.params as never[]);
  const [{ n: dn }] = await sql`select count(distinct artist_id) as n from album`;
  assert.equal(dc, dn);
});

Deno.test("rootKeys returns the given rows in the given order (single and composite keys)", async () => {
  const rows = await read({
    relation: "artist",
    select: ["artist_id"],
    where: ["=", "artist_id", 99],
    limit: 1,
  }, {
    rootKeys: { columns: ["artist_id"], rows: [[3], [1], [2], [1]] },
  });
  assert.deepEqual(col(rows, "artist_id"), [3, 1, 2, 1]);
  const pt = await read({
    relation: "playlist_track",
    join: { track: { relation: "track", on: { track_id: "track_id" }, select: ["name"] } },
  }, { rootKeys: { columns: ["track_id", "playlist_id"], rows: [[3402, 1], [1, 99], [3402, 8]] } });
  assert.deepEqual(pt.map((r) => [r.playlist_id, r.track_id]), [[1, 3402], [8, 3402]]);
});

Deno.test("well-known $param placeholders bind JSON values with their casts", async () => {
  const params = { ids: {}, min: {}, name: {}, meta: {}, none: {} };
  const tree = {
    relation: "track",
    select: ["track_id"],
    where: [
      "and",
      ["in", "track_id", ["$param", "ids", "int[]"]],
      [">=", "milliseconds", ["$param", "min", "integer"]],
      ["not_like", "name", ["$param", "name", "text"]],
      ["is_null", ["$param", "none", "text"]],
    ],
    order_by: ["track_id"],
  };
  const node = parseQuery(schema, tree, { maxDepth: 6, params });
  const c = compileRead(node, { params: { ids: [1, 2, 3, 4], min: 300000, name: "%Rock%" } });
  assert.deepEqual(await rowsOf(sql, c.rows), [{ track_id: 2 }]);
  const docs = parseQuery(schema, {
    relation: "doc",
    select: ["id"],
    where: ["@>", "meta", ["$param", "meta"]],
  }, { maxDepth: 6, params });
  assert.deepEqual(await rowsOf(sql, compileRead(docs, { params: { meta: { pages: 3 } } }).rows), [{
    id: 2,
  }]);
});

Deno.test("same shape → same SQL text and shapeKey; values only in params", () => {
  const mk = (n: number, s: string) =>
    parseQuery(schema, {
      relation: "track",
      where: ["and", [">", "track_id", n], ["like", "name", [s]]],
      limit: Math.ceil(n),
    }, {
      maxDepth: 6,
    });
  const a = compileRead(mk(1, "a%"));
  const b = compileRead(mk(7, "zz"));
  assert.equal(a.rows.sql, b.rows.sql);
  assert.equal(shapeKey(mk(1, "a%")), shapeKey(mk(7, "zz")));
  assert.notDeepEqual(a.rows.params, b.rows.params);
  assert.ok(!a.rows.sql.includes("a%"));
  const other = parseQuery(schema, { relation: "track", where: [">", "track_id", 1] }, {
    maxDepth: 6,
  });
  assert.notEqual(shapeKey(other), shapeKey(mk(1, "a%")));
  const float = mk(1.5, "a%");
  assert.notEqual(shapeKey(float), shapeKey(mk(1, "a%")));
});

Deno.test("stop the database", async () => {
  await sql.end();
  await stopDb();
});
