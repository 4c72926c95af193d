import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, schemaOf, stopDb } from "../helpers/db.ts";
import { FIXTURE_SQL, rowsOf } from "./fixture.ts";
import { type ParseOptions, parseQuery } from "../../src/compile/parse.ts";
import { compileRead } from "../../src/compile/sql.ts";
import { SvcError } from "../../src/svc_error.ts";
import { Blacklist } from "../../src/db/blacklist.ts";

const uri = await chinookDb("errors", FIXTURE_SQL);
const schema = await schemaOf(uri);

/** Asserts that parsing `tree` fails with `code` at `pointer`. */
function fails(tree: unknown, code: string, pointer: string, opts: Partial<ParseOptions> = {}) {
  try {
    parseQuery(schema, tree, { maxDepth: 6, ...opts });
  } catch (e) {
    assert.ok(e instanceof SvcError, `not a SvcError: ${e}`);
    assert.equal(e.code, code, `${JSON.stringify(tree)}: ${e.message}`);
    assert.deepEqual(e.details, { pointer }, `${JSON.stringify(tree)}: ${e.message}`);
    return;
  }
  assert.fail(`no error for ${JSON.stringify(tree)}`);
}

/** The message of the error a query tree fails with. */
function message(tree: unknown): string {
  try {
    parseQuery(schema, tree, { maxDepth: 6 });
  } catch (e) {
    return (e as Error).message;
  }
  assert.fail(`no error for ${JSON.stringify(tree)}`);
}

const albums = { relation: "album", on: { artist_id: "artist_id" } };
const artistOfAlbum = { relation: "artist", on: { artist_id: "artist_id" } };

Deno.test("QUERY_INVALID: malformed relation objects", () => {
  fails([], "QUERY_INVALID", "");
  fails("artist", "QUERY_INVALID", "");
  fails({}, "QUERY_INVALID", "");
  fails({ relation: "artist", foo: 1 }, "QUERY_INVALID", "/foo");
  fails({ relation: "artist", on: { a: "b" } }, "QUERY_INVALID", "/on");
  fails({ relation: 5 }, "QUERY_INVALID", "/relation");
  fails({ relation: "artist", function: "answer" }, "QUERY_INVALID", "/function");
  fails({ relation: "artist", arguments: [] }, "QUERY_INVALID", "/arguments");
  fails({ relation: "artist", alias: 3 }, "QUERY_INVALID", "/alias");
  fails({ wellknown: "x" }, "QUERY_INVALID", "/wellknown");
  fails({ relation: "artist", limit: -1 }, "QUERY_INVALID", "/limit");
  fails({ relation: "artist", limit: "5" }, "QUERY_INVALID", "/limit");
  fails({ relation: "artist", offset: 1.5 }, "QUERY_INVALID", "/offset");
  fails({ relation: "artist", order_by: "name" }, "QUERY_INVALID", "/order_by");
  fails(
    { relation: "artist", order_by: [["desc", "name", "nulls"]] },
    "QUERY_INVALID",
    "/order_by/0/2",
  );
  fails(
    { relation: "artist", order_by: [["desc", "name", "nulls_last", 1]] },
    "QUERY_INVALID",
    "/order_by/0",
  );
  fails({ relation: "artist", select: 5 }, "QUERY_INVALID", "/select");
  fails({ relation: "artist", select: "everything" }, "QUERY_INVALID", "/select");
  fails({ relation: "artist", select: [5] }, "QUERY_INVALID", "/select/0");
  fails({ relation: "artist", select: ["name", "own"] }, "QUERY_INVALID", "/select");
  fails({ relation: "artist", write_mode: "replace" }, "QUERY_INVALID", "/write_mode");
  fails({ relation: "artist", on_conflict: [] }, "QUERY_INVALID", "/on_conflict");
  fails({ relation: "artist", on_conflict: [5] }, "QUERY_INVALID", "/on_conflict/0");
  fails({ relation: "artist", on_conflict: ["name", "name"] }, "QUERY_INVALID", "/on_conflict/1");
  fails({ relation: "artist", join: [] }, "QUERY_INVALID", "/join");
  fails(
    { relation: "artist", join: { albums: { relation: "album" } } },
    "QUERY_INVALID",
    "/join/albums/on",
  );
  fails({ relation: "artist", join: { albums: 5 } }, "QUERY_INVALID", "/join/albums");
  fails(
    { relation: "artist", join: { albums: { ...albums, on: { artist_id: 1 } } } },
    "QUERY_INVALID",
    "/join/albums/on/artist_id",
  );
  fails(
    { relation: "artist", join: { albums: { ...albums, bogus: true } } },
    "QUERY_INVALID",
    "/join/albums/bogus",
  );
  fails({ relation: "artist", distinct_on: "name" }, "QUERY_INVALID", "/distinct_on");
  fails({ relation: "artist", foo: 1 }, "QUERY_INVALID", "/query/foo", { pointer: "/query" });
});

Deno.test("an unknown relation field gets a hint when it is a typo of a field", () => {
  assert.match(
    message({ relation: "artist", limt: 5 }),
    /unknown relation field 'limt'; did you mean 'limit'\?/,
  );
  assert.match(message({ relation: "artist", ordr_by: ["name"] }), /did you mean 'order_by'/);
  assert.doesNotMatch(message({ relation: "artist", zzzzzz: 1 }), /did you mean/);
  // A request's flag put inside its query says where it goes.
  assert.match(
    message({ relation: "artist", count: true }),
    /unknown relation field 'count'; 'count' is a field of the request, beside its query: \{"query": \{"relation": …\}, "count": …\}/,
  );
});

Deno.test("literals computed into every row (select, order_by, distinct_on) hold 4096 characters together", () => {
  // Found by a hostile probe: a 1 MB literal in an order_by made PostgreSQL sort 1 MB keys (8.3 GB
  // of temporary files for 8,715 rows).
  const long = "x".repeat(5000);
  fails(
    { relation: "track", order_by: [["||", "name", [long]]] },
    "QUERY_INVALID",
    "/order_by/0/2",
  );
  fails(
    { relation: "track", select: { a: ["||", "name", [long]] } },
    "QUERY_INVALID",
    "/select/a/2",
  );
  const half = "x".repeat(2500);
  fails(
    {
      relation: "track",
      select: { a: ["||", "name", [half]] },
      order_by: [["||", "name", [half]]],
    },
    "QUERY_INVALID",
    "/order_by/0/2",
  );
  // A where's literals are only compared: a long one is fine.
  parseQuery(schema, { relation: "track", where: ["=", "name", [long]] }, { maxDepth: 6 });
});

Deno.test("an unknown name in select says how to select a relation (never a string literal)", () => {
  const m = message({ relation: "artist", select: ["name", "albumz_of_artist"] });
  assert.match(
    m,
    /unknown column 'albumz_of_artist'; a select item is a column, a computed field or an alias declared under 'join'/,
  );
  assert.doesNotMatch(m, /string literal/);
  // In an expression, a bare name may have meant a literal: that hint stays.
  assert.match(
    message({ relation: "artist", where: ["=", "name", "AC/DC"] }),
    /a string literal is written \["AC\/DC"\]/,
  );
});

Deno.test("QUERY_INVALID: expressions (operators, arity, operands) with pointers", () => {
  const w = (where: unknown, pointer: string) =>
    fails({ relation: "track", where }, "QUERY_INVALID", pointer);
  w([], "/where");
  w({ a: 1 }, "/where");
  w([1, 2], "/where/0");
  w(["foo", 1, 2], "/where/0");
  w(["=", "track_id"], "/where");
  w(["=", "track_id", 1, 2], "/where");
  w(["between", 1, "track_id"], "/where");
  w(["not", true, false], "/where");
  w(["in", "track_id"], "/where");
  w(["fts", "name"], "/where");
  w(["and", ["=", "track_id", 1], ["like", "name"]], "/where/2");
  w(["and", ["=", "track_id", 1], "name"], "/where/2");
  w("name", "/where");
  w(5, "/where");
  w(["is_null"], "/where");
  w(["+", "track_id", 1], "/where");
  w(["=", ["cast", "track_id", 5], 1], "/where/1/2");
  w(["=", ["cast", "track_id"], 1], "/where/1");
  w(["=", ["$param", "x"], 1], "/where/1");
  w(["=", [".", "name", "x"], 1], "/where/1/1");
  w(["=", [".", "album", 5], 1], "/where/1/2");
  w(["=", ["agg", "count"], 1], "/where/1");
  w(["and", ["or", ["not", ["=", "track_id", ["->", "name"]]]]], "/where/1/1/1/2");
  let deep: unknown = ["=", "track_id", 1];
  for (let i = 0; i < 200; i++) deep = ["not", deep];
  w(deep, "/where" + "/1".repeat(65));
  fails({ relation: "track", where: ["=", ["$param", "nope"], 1] }, "QUERY_INVALID", "/where/1/1", {
    params: { yes: {} },
  });
  fails(
    { relation: "track", where: ["=", ["$param", "yes", "nosuchtype"], 1] },
    "QUERY_UNKNOWN_TYPE",
    "/where/1/2",
    {
      params: { yes: {} },
    },
  );
  fails(
    { relation: "track", select: { "a/b~": ["agg", "median", ["x"]] } },
    "QUERY_INVALID",
    "/select/a~1b~0/1",
  );
  fails(
    { relation: "artist", select: { n: ["agg", "sum", ["albums"]] }, join: { albums } },
    "QUERY_INVALID",
    "/select/n/2",
  );
  fails(
    { relation: "artist", select: { n: ["agg", "count", "albums"] }, join: { albums } },
    "QUERY_INVALID",
    "/select/n/2",
  );
  fails(
    {
      relation: "album",
      select: { n: ["agg", "count", ["artist"]] },
      join: { artist: artistOfAlbum },
    },
    "QUERY_INVALID",
    "/select/n/2/0",
  );
  fails(
    { relation: "artist", select: { x: [".", "albums", "title"] }, join: { albums } },
    "QUERY_INVALID",
    "/select/x/1",
  );
  fails(
    { relation: "artist", where: ["is_null", "albums"], join: { albums } },
    "QUERY_INVALID",
    "/where/1",
  );
  fails(
    {
      relation: "artist",
      select: { n: ["agg", "count", ["albums"], ["+", 1, 2]] },
      join: { albums },
    },
    "QUERY_INVALID",
    "/select/n/3",
  );
  fails({ relation: "artist", select: { x: ["set", 5] } }, "QUERY_INVALID", "/select/x/1");
});

Deno.test("QUERY_INVALID: function calls (arguments, overloads, pseudo-type results)", () => {
  fails({ function: "answer", arguments: 5 }, "QUERY_INVALID", "/arguments");
  fails({ function: "answer", arguments: [1] }, "QUERY_INVALID", "/arguments");
  fails({ function: "search_docs" }, "QUERY_INVALID", "/arguments");
  fails({ function: "search_docs", arguments: { nope: ["x"] } }, "QUERY_INVALID", "/arguments");
  fails(
    { function: "search_docs", arguments: { q: "name" } },
    "QUERY_UNKNOWN_COLUMN",
    "/arguments/q",
  );
  fails({ function: "pick", arguments: [1] }, "QUERY_INVALID", "/arguments");
  fails({ function: "noop" }, "QUERY_INVALID", "/function");
});

Deno.test("QUERY_UNKNOWN_RELATION: unknown, wrong schema, unknown function, blacklisted", async () => {
  fails({ relation: "nope" }, "QUERY_UNKNOWN_RELATION", "/relation");
  fails({ relation: "artist", schema: "other" }, "QUERY_UNKNOWN_RELATION", "/relation");
  fails({ function: "nope" }, "QUERY_UNKNOWN_RELATION", "/function");
  fails({ function: "pg_sleep", arguments: [1] }, "QUERY_UNKNOWN_RELATION", "/function");
  fails(
    { relation: "artist", join: { x: { relation: "nope", on: { a: "b" } } } },
    "QUERY_UNKNOWN_RELATION",
    "/join/x/relation",
  );
  fails({ relation: "pg_class" }, "QUERY_UNKNOWN_RELATION", "/relation");
  const blacklisted = await schemaOf(uri, new Blacklist({ relations: { public: { genre: "y" } } }));
  assert.throws(
    () => parseQuery(blacklisted, { relation: "genre" }, { maxDepth: 6 }),
    (e: unknown) => e instanceof SvcError && e.code === "QUERY_UNKNOWN_RELATION",
  );
  assert.throws(
    () =>
      parseQuery(blacklisted, {
        relation: "track",
        join: { g: { relation: "genre", on: { genre_id: "genre_id" } } },
      }, {
        maxDepth: 6,
      }),
    (e: unknown) => e instanceof SvcError && e.code === "QUERY_UNKNOWN_RELATION",
  );
});

Deno.test("privileges never refuse a query: the role only narrows suggestions", () => {
  // ~anonymous holds no privilege on doc or secret_answer; PostgreSQL decides at run time.
  const role = "~anonymous";
  assert.equal(parseQuery(schema, { relation: "artist" }, { maxDepth: 6, role }).name, "artist");
  assert.ok(parseQuery(schema, { relation: "doc" }, { maxDepth: 6, role }));
  assert.ok(
    parseQuery(schema, {
      relation: "track",
      join: { docs: { relation: "doc", on: { track_id: "track_id" } } },
    }, { maxDepth: 6, role }),
  );
  assert.ok(parseQuery(schema, { function: "secret_answer" }, { maxDepth: 6, role }));
  assert.ok(parseQuery(schema, { function: "answer" }, { maxDepth: 6, role }));
  fails({ relation: "no_such" }, "QUERY_UNKNOWN_RELATION", "/relation", { role });
});

Deno.test("QUERY_UNKNOWN_TYPE: unknown and refused cast targets answer alike", () => {
  for (
    const t of ["nosuchtype", "regclass", "oid", "regconfig[]", "pg_class", "pg_catalog.regtype"]
  ) {
    fails(
      { relation: "track", where: ["=", ["cast", "track_id", t], 1] },
      "QUERY_UNKNOWN_TYPE",
      "/where/1/2",
    );
  }
});

Deno.test("QUERY_UNKNOWN_COLUMN: where, select, on, '.', agg, set, on_conflict, composite field", () => {
  fails({ relation: "artist", where: ["=", "nope", 1] }, "QUERY_UNKNOWN_COLUMN", "/where/1");
  fails({ relation: "artist", select: ["nope"] }, "QUERY_UNKNOWN_COLUMN", "/select/0");
  fails(
    { relation: "artist", select: { x: ["get", "nope"] } },
    "QUERY_UNKNOWN_COLUMN",
    "/select/x/1",
  );
  fails(
    { relation: "artist", select: { x: ["set", "nope"] } },
    "QUERY_UNKNOWN_COLUMN",
    "/select/x/1",
  );
  fails(
    { relation: "artist", order_by: [["desc", "nope"]] },
    "QUERY_UNKNOWN_COLUMN",
    "/order_by/0/1",
  );
  fails({ relation: "artist", on_conflict: ["nope"] }, "QUERY_UNKNOWN_COLUMN", "/on_conflict/0");
  fails(
    { relation: "artist", join: { albums: { ...albums, on: { nope: "artist_id" } } } },
    "QUERY_UNKNOWN_COLUMN",
    "/join/albums/on/nope",
  );
  fails(
    { relation: "artist", join: { albums: { ...albums, on: { artist_id: "nope" } } } },
    "QUERY_UNKNOWN_COLUMN",
    "/join/albums/on/artist_id",
  );
  fails(
    { relation: "album", select: { x: [".", "artist", "nope"] }, join: { artist: artistOfAlbum } },
    "QUERY_UNKNOWN_COLUMN",
    "/select/x/2",
  );
  fails(
    { relation: "album", select: { x: [".", "nope", "name"] } },
    "QUERY_UNKNOWN_COLUMN",
    "/select/x/1",
  );
  fails(
    { relation: "artist", select: { n: ["agg", "count", ["nope"]] } },
    "QUERY_UNKNOWN_COLUMN",
    "/select/n/2/0",
  );
  fails(
    { relation: "artist", select: { n: ["agg", "max", ["albums", "nope"]] }, join: { albums } },
    "QUERY_UNKNOWN_COLUMN",
    "/select/n/2/1",
  );
  fails(
    {
      relation: "artist",
      select: { n: ["agg", "count", ["albums"], ["=", "nope", 1]] },
      join: { albums },
    },
    "QUERY_UNKNOWN_COLUMN",
    "/select/n/3/1",
  );
  fails(
    { relation: "doc", select: { x: [".", "home", "nope"] } },
    "QUERY_UNKNOWN_COLUMN",
    "/select/x/2",
  );
  fails(
    { relation: "doc", select: { x: [".", [".", "home", "pos"], "alt"] } },
    "QUERY_UNKNOWN_COLUMN",
    "/select/x/2",
  );
  fails(
    { relation: "artist", join: { albums: { ...albums, where: ["=", "name", ["x"]] } } },
    "QUERY_UNKNOWN_COLUMN",
    "/join/albums/where/1",
  );
});

Deno.test("QUERY_BAD_JOIN names the 'on' of the foreign keys that do join the two", () => {
  assert.match(
    message({ relation: "artist", join: { albums: { ...albums, on: { title: "name" } } } }),
    /join with 'on': \{"artist_id":"artist_id"\}/,
  );
  assert.match(
    message({
      relation: "artist",
      join: { g: { relation: "genre", on: { genre_id: "artist_id" } } },
    }),
    /no foreign key links these two relations/,
  );
});

Deno.test("a join without 'on' names the 'on' of the foreign keys that would join the two", () => {
  assert.match(
    message({ relation: "artist", join: { albums: { relation: "album" } } }),
    /needs 'on'.*join with \{"artist_id":"artist_id"\}/,
  );
  assert.match(
    message({ relation: "album", join: { by: { relation: "artist", on: {} } } }),
    /needs 'on'.*join with \{"artist_id":"artist_id"\}/,
  );
  assert.doesNotMatch(
    message({ relation: "artist", join: { g: { relation: "genre" } } }),
    /join with/,
  );
});

Deno.test("QUERY_BAD_JOIN: 'on' matching no foreign key", () => {
  fails(
    { relation: "artist", join: { albums: { ...albums, on: { title: "name" } } } },
    "QUERY_BAD_JOIN",
    "/join/albums/on",
  );
  fails(
    { relation: "artist", join: { g: { relation: "genre", on: { genre_id: "artist_id" } } } },
    "QUERY_BAD_JOIN",
    "/join/g/on",
  );
  fails(
    {
      relation: "artist",
      join: { albums: { ...albums, on: { artist_id: "artist_id", album_id: "artist_id" } } },
    },
    "QUERY_BAD_JOIN",
    "/join/albums/on",
  );
  fails(
    {
      relation: "employee",
      join: { m: { relation: "employee", on: { employee_id: "employee_id" } } },
    },
    "QUERY_BAD_JOIN",
    "/join/m/on",
  );
});

Deno.test("QUERY_MAX_DEPTH_EXCEEDED at the first join too deep", () => {
  const tree = {
    relation: "artist",
    join: {
      albums: { ...albums, join: { tracks: { relation: "track", on: { album_id: "album_id" } } } },
    },
  };
  fails(tree, "QUERY_MAX_DEPTH_EXCEEDED", "/join/albums/join/tracks", { maxDepth: 1 });
  fails(tree, "QUERY_MAX_DEPTH_EXCEEDED", "/join/albums", { maxDepth: 0 });
  assert.equal(parseQuery(schema, tree, { maxDepth: 2 }).joins[0].node.joins[0].node.depth, 2);
});

Deno.test("QUERY_DISTINCT_ON_NOT_PREFIX", () => {
  fails(
    { relation: "album", distinct_on: ["title"], order_by: ["artist_id"] },
    "QUERY_DISTINCT_ON_NOT_PREFIX",
    "/distinct_on/0",
  );
  fails(
    { relation: "album", distinct_on: ["artist_id"] },
    "QUERY_DISTINCT_ON_NOT_PREFIX",
    "/distinct_on/0",
  );
  fails(
    { relation: "album", distinct_on: ["artist_id", "title"], order_by: ["artist_id"] },
    "QUERY_DISTINCT_ON_NOT_PREFIX",
    "/distinct_on/1",
  );
  fails(
    { relation: "album", distinct_on: ["artist_id", "title"], order_by: ["title", "artist_id"] },
    "QUERY_DISTINCT_ON_NOT_PREFIX",
    "/distinct_on/0",
  );
  const ok = parseQuery(schema, {
    relation: "album",
    distinct_on: ["artist_id"],
    order_by: [["desc", "artist_id", "nulls_last"], "title"],
  }, { maxDepth: 6 });
  assert.equal(ok.distinctOn.length, 1);
});

Deno.test("named arguments pick an overload; rootKeys with an unknown column is an INTERNAL SvcError", async () => {
  const sql = sqlClient(uri);
  try {
    const n = parseQuery(schema, { function: "pick", arguments: { a: 21 } }, { maxDepth: 6 });
    assert.deepEqual(await rowsOf(sql, compileRead(n).rows), [{ pick: 42 }]);
    const t = parseQuery(schema, { function: "pick", arguments: { b: ["x"] } }, { maxDepth: 6 });
    assert.deepEqual(await rowsOf(sql, compileRead(t).rows), [{ pick: "X" }]);
  } finally {
    await sql.end();
  }
  const node = parseQuery(schema, { relation: "artist" }, { maxDepth: 6 });
  assert.throws(
    () => compileRead(node, { rootKeys: { columns: ["nope"], rows: [[1]] } }),
    (e: unknown) => e instanceof SvcError && e.code === "INTERNAL",
  );
});

Deno.test("a query with more values than the protocol allows is QUERY_INVALID", () => {
  const values = Array.from({ length: 70000 }, (_, i) => i);
  const node = parseQuery(schema, { relation: "track", where: ["in", "track_id", ...values] }, {
    maxDepth: 6,
  });
  assert.throws(
    () => compileRead(node),
    (e: unknown) => e instanceof SvcError && e.code === "QUERY_INVALID",
  );
});

Deno.test("stop the database", async () => {
  await stopDb();
});
