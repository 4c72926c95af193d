import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, schemaOf, stopDb } from "../helpers/db.ts";
import { FIXTURE_SQL, rowsOf } from "../compile/fixture.ts";
import {
  checkQueryString,
  inGetTerms,
  parseGetQuery,
  parseWhere,
} from "../../src/request/query_string.ts";
import { parseQuery } from "../../src/compile/parse.ts";
import { compileRead } from "../../src/compile/sql.ts";
import { SvcError } from "../../src/svc_error.ts";
import { parseJson } from "../../src/request/body.ts";

const uri = await chinookDb("gets", FIXTURE_SQL);
const schema = await schemaOf(uri);
const sql = sqlClient(uri);

/** Asserts GET `qs` decodes to `post`, compiles to the same SQL and returns the same rows. */
async function same(qs: string, post: Record<string, unknown>): Promise<unknown[]> {
  const got = parseGetQuery(new URLSearchParams(qs));
  assert.deepEqual(got.tree, post);
  const a = compileRead(parseQuery(schema, got.tree, { maxDepth: 6 }));
  const b = compileRead(parseQuery(schema, post, { maxDepth: 6 }));
  assert.equal(a.rows.sql, b.rows.sql);
  assert.deepEqual(a.rows.params, b.rows.params);
  const rows = await rowsOf(sql, a.rows);
  assert.deepEqual(rows, await rowsOf(sql, b.rows));
  return rows;
}

function getFails(qs: string, code: string, parameter?: string) {
  try {
    parseGetQuery(new URLSearchParams(qs));
  } catch (e) {
    assert.ok(e instanceof SvcError, String(e));
    assert.equal(e.code, code, `${qs}: ${e.message}`);
    if (parameter) assert.equal((e.details as { parameter: string }).parameter, parameter);
    return;
  }
  assert.fail(`no error for ${qs}`);
}

Deno.test("GET: filters, order_by forms, limit/offset give the POST tree and the same rows", async () => {
  const rows = await same(
    "relation=track&select=track_id,name&where=and(gte(milliseconds,300000),like(name,'A%25'))" +
      "&order_by=-milliseconds,name&limit=5&offset=1",
    {
      relation: "track",
      select: ["track_id", "name"],
      where: ["and", [">=", "milliseconds", 300000], ["like", "name", ["A%"]]],
      order_by: [["desc", "milliseconds"], "name"],
      limit: 5,
      offset: 1,
    },
  );
  assert.equal(rows.length, 5);
  await same("relation=track&select=own&order_by=composer.desc.nullslast,track_id.asc&limit=3", {
    relation: "track",
    select: "own",
    order_by: [["desc", "composer", "nulls_last"], "track_id"],
    limit: 3,
  });
  await same("relation=track&select=track_id&order_by=composer.nullsfirst,-track_id&limit=3", {
    relation: "track",
    select: ["track_id"],
    order_by: [["asc", "composer", "nulls_first"], ["desc", "track_id"]],
    limit: 3,
  });
  await same(
    "relation=album&select=artist_id,title&distinct_on=artist_id&order_by=artist_id,title&limit=4",
    {
      relation: "album",
      select: ["artist_id", "title"],
      distinct_on: ["artist_id"],
      order_by: ["artist_id", "title"],
      limit: 4,
    },
  );
});

Deno.test("GET: nested joins with on, select, where, limit, order_by", async () => {
  const rows = await same(
    "relation=artist&where=eq(artist_id,1)&join.albums.relation=album&join.albums.on.artist_id=artist_id" +
      "&join.albums.select=title,tracks&join.albums.order_by=title.desc" +
      "&join.albums.join.tracks.relation=track&join.albums.join.tracks.on.album_id=album_id" +
      "&join.albums.join.tracks.select=name&join.albums.join.tracks.limit=2" +
      "&join.albums.join.tracks.where=gt(milliseconds,1)&join.albums.join.tracks.order_by=track_id",
    {
      relation: "artist",
      where: ["=", "artist_id", 1],
      join: {
        albums: {
          relation: "album",
          on: { artist_id: "artist_id" },
          select: ["title", "tracks"],
          order_by: [["desc", "title"]],
          join: {
            tracks: {
              relation: "track",
              on: { album_id: "album_id" },
              select: ["name"],
              limit: 2,
              where: [">", "milliseconds", 1],
              order_by: ["track_id"],
            },
          },
        },
      },
    },
  );
  assert.deepEqual(rows, [{
    artist_id: 1,
    name: "AC/DC",
    albums: [
      { title: "Let There Be Rock", tracks: [{ name: "Go Down" }, { name: "Dog Eat Dog" }] },
      {
        title: "For Those About To Rock We Salute You",
        tracks: [{ name: "For Those About To Rock (We Salute You)" }, {
          name: "Put The Finger On You",
        }],
      },
    ],
  }]);
  await same(
    "relation=invoice_line&select=invoice_line_id,track&where=eq(track.name,'Go Down')&limit=2&order_by=invoice_line_id" +
      "&join.track.relation=track&join.track.on.track_id=track_id&join.track.select=name&join.track.schema=public",
    {
      relation: "invoice_line",
      select: ["invoice_line_id", "track"],
      where: ["=", [".", "track", "name"], ["Go Down"]],
      limit: 2,
      order_by: ["invoice_line_id"],
      join: {
        track: {
          relation: "track",
          on: { track_id: "track_id" },
          select: ["name"],
          schema: "public",
        },
      },
    },
  );
});

Deno.test("GET: every where function and literal form", async () => {
  assert.deepEqual(
    parseWhere(
      "or(eq(a,1),neq(a,-2.5),lt(a,1e3),lte(a,0),gt(a,true),gte(a,null),like(b,'it''s'),ilike(b,'x')," +
        "in(a,1,2,3),not_in(a,'x'),between(1,a,2),is_null(a),is_not_null(b),not(eq(a,false))," +
        "contains(t,'{a}'),contained(t,'{a,b}'),overlaps(t,'{c}'),fts(s,'q w'),fts(s,'q','english')," +
        'and( eq( x.y , "odd name" ) ))',
    ),
    [
      "or",
      ["=", "a", 1],
      ["<>", "a", -2.5],
      ["<", "a", 1000],
      ["<=", "a", 0],
      [">", "a", true],
      [">=", "a", null],
      ["like", "b", ["it's"]],
      ["ilike", "b", ["x"]],
      ["in", "a", 1, 2, 3],
      ["not_in", "a", ["x"]],
      ["between", 1, "a", 2],
      ["is_null", "a"],
      ["is_not_null", "b"],
      ["not", ["=", "a", false]],
      ["@>", "t", ["{a}"]],
      ["<@", "t", ["{a,b}"]],
      ["&&", "t", ["{c}"]],
      ["fts", "s", ["q w"]],
      ["fts", "s", ["q"], ["english"]],
      ["and", ["=", [".", "x", "y"], "odd name"]],
    ],
  );
  await same(
    "relation=doc&select=id&where=and(contains(tags,'{rock}'),not(is_null(home)),in(feeling,'happy','ok'))",
    {
      relation: "doc",
      select: ["id"],
      where: ["and", ["@>", "tags", ["{rock}"]], ["not", ["is_null", "home"]], ["in", "feeling", [
        "happy",
      ], ["ok"]]],
    },
  );
  await same("function=search_docs&arguments.q=guitars&arguments.cfg='english'&select=id,title", {
    function: "search_docs",
    arguments: { q: ["guitars"], cfg: ["english"] },
    select: ["id", "title"],
  });
  await same(
    "function=long_tracks&arguments.min_ms=1000000&where=lt(ms,1100000)&order_by=id&select=full",
    {
      function: "long_tracks",
      arguments: { min_ms: 1000000 },
      where: ["<", "ms", 1100000],
      order_by: ["id"],
      select: "full",
    },
  );
  await same("relation=doc&alias=d&schema=public&select=id&where=fts(search,'guitars','english')", {
    relation: "doc",
    alias: "d",
    schema: "public",
    select: ["id"],
    where: ["fts", "search", ["guitars"], ["english"]],
  });
});

Deno.test("GET: wellknown and params decoding", () => {
  const got = parseGetQuery(
    new URLSearchParams(
      "wellknown=top&params.n=5&params.s=abc&params.q=%22123%22&params.arr=%5B1%2C2%5D&params.b=true&params.o=%7B%22a%22%3A1%7D",
    ),
  );
  const params = { n: 5, s: "abc", q: "123", arr: [1, 2], b: true, o: { a: 1 } };
  assert.deepEqual(got, { tree: { wellknown: "top", params }, wellknown: "top", params });
  getFails("wellknown=top&limit=5", "QUERY_INVALID", "limit");
  getFails("wellknown=top&params.a.0=1", "QUERY_INVALID", "params.a.0");
  getFails("relation=artist&params.a=1", "QUERY_INVALID", "params.a");
});

Deno.test("GET: errors are said in the GET form's terms: the parameter, 'x' literals, did you mean", () => {
  const err = (q: string) => {
    try {
      parseGetQuery(new URLSearchParams(q));
    } catch (e) {
      return e as SvcError;
    }
    assert.fail(q);
  };
  assert.match(err("relation=artist&selct=name").message, /did you mean 'select'\?/);
  assert.match(
    err("relation=artist&join.a.ordr_by=x").message,
    /did you mean 'join\.a\.order_by'\?/,
  );
  // The typo is not always the key's last name.
  const near: Record<string, string> = {
    "argumnts.a": "arguments.a",
    "wher.x": "where.x",
    "joi.x.relation": "join.x.relation",
    "join.x.onn.a": "join.x.on.a",
  };
  for (const [typo, meant] of Object.entries(near)) {
    const m = err(`relation=artist&${typo}=1`).message;
    assert.ok(m.endsWith(`did you mean '${meant}'?`), m);
  }
  // An error of the tree (compiled later) names the parameter and the GET literal.
  const tree = new SvcError(
    "QUERY_UNKNOWN_COLUMN",
    `unknown column 'O"N'; a string literal is written ["O\\"N"]`,
    {
      details: { pointer: "/join/a~1b/where/2" },
    },
  );
  const got = inGetTerms(tree) as SvcError;
  assert.equal(got.code, "QUERY_UNKNOWN_COLUMN");
  assert.equal(got.status, tree.status);
  assert.deepEqual(got.details, { pointer: "/join/a~1b/where/2", parameter: "join.a/b.where" });
  assert.equal(got.message, `unknown column 'O"N'; a string literal is written 'O"N'`);
  const on = inGetTerms(
    new SvcError("QUERY_UNKNOWN_COLUMN", "unknown column 'x'", {
      details: { pointer: "/join/a/on/x" },
    }),
  ) as SvcError;
  assert.equal((on.details as { parameter: string }).parameter, "join.a.on.x");
});

Deno.test("GET: ComplexQuery parameters and unknown parameters are rejected", () => {
  for (
    const p of [
      "count=true",
      "stats=true",
      "query_plan=true",
      "sql=true",
      "rollback=true",
      "returns=none",
      "data=[]",
      "query.relation=artist",
      "query=x",
    ]
  ) {
    getFails(
      `relation=artist&${p}`,
      "QUERY_COMPLEX_NOT_ALLOWED_ON_GET",
      p.slice(0, p.indexOf("=")),
    );
  }
  getFails("relation=artist&foo=1", "QUERY_INVALID", "foo");
  getFails("relation=artist&relation=album", "QUERY_INVALID", "relation");
  getFails("relation=artist&limit=abc", "QUERY_INVALID", "limit");
  getFails("relation=artist&join.a=x", "QUERY_INVALID", "join.a");
  getFails("relation=artist&join.a.bogus=x", "QUERY_INVALID", "join.a.bogus");
  getFails("relation=artist&join..relation=x", "QUERY_INVALID", "join..relation");
  getFails("relation=artist&where=eq(a,1", "QUERY_INVALID", "where");
  getFails("relation=artist&where=foo(a,1)", "QUERY_INVALID", "where");
  getFails("relation=artist&where=eq(a,'x)", "QUERY_INVALID", "where");
  getFails("relation=artist&where=eq(a,1) x", "QUERY_INVALID", "where");
  getFails("relation=artist&where=eq(a;1)", "QUERY_INVALID", "where");
  getFails("relation=artist&join.a.where=eq(", "QUERY_INVALID", "join.a.where");
  // __proto__ stays an own key, never touches prototypes
  const t =
    parseGetQuery(new URLSearchParams("relation=artist&join.__proto__.relation=album")).tree;
  assert.ok(Object.hasOwn(t.join as object, "__proto__"));
  assert.equal(({} as Record<string, unknown>).relation, undefined);
});

/** The error of parsing GET `qs` with `maxDepth`, asserted to be the nesting limit's. */
function tooDeep(qs: string, parameter: string, maxDepth?: number): void {
  try {
    parseGetQuery(new URLSearchParams(qs), maxDepth);
  } catch (e) {
    assert.ok(e instanceof SvcError, `not a SvcError: ${e}`);
    assert.equal(e.code, "QUERY_INVALID", e.message);
    assert.deepEqual(e.details, { parameter, limit: "http.max_json_depth" });
    return;
  }
  assert.fail(`no error for ${qs.slice(0, 80)}…`);
}

/** The POST body equivalent of a GET tree passes the body's rule exactly when the GET passes. */
function bodyPasses(tree: unknown, maxDepth: number): boolean {
  try {
    parseJson(JSON.stringify(tree), maxDepth);
    return true;
  } catch {
    return false;
  }
}

Deno.test("GET nesting obeys http.max_json_depth as a body does: 400, never a stack overflow", () => {
  const nots = (n: number) => "not(".repeat(n) + "eq(a,1)" + ")".repeat(n);
  // 63 calls under the root relation: the depth of a body's where nested as deep (64 levels).
  const ok = parseGetQuery(new URLSearchParams(`relation=artist&where=${nots(62)}`)).tree;
  assert.ok(bodyPasses(ok, 64));
  tooDeep(`relation=artist&where=${nots(63)}`, "where");
  assert.ok(!bodyPasses({ relation: "artist", where: nestedNot(64) }, 64));
  // What broke the parser (a RangeError, 500): 10,000 open calls, closed or not.
  tooDeep(`relation=artist&where=${"not(".repeat(10_000)}`, "where");
  tooDeep(`relation=artist&where=${nots(10_000)}`, "where");
  // A quoted value is one level more (["text"]); a dotted name too ([".", a, b]).
  tooDeep(`relation=artist&where=${"not(".repeat(62)}eq(a,'x')${")".repeat(62)}`, "where");
  // Joins: `join.<alias>.` is two levels (join, then the alias), as in a body.
  const joins = (k: number) => "join.a.".repeat(k);
  const deepest = parseGetQuery(new URLSearchParams(`relation=artist&${joins(31)}relation=x`));
  assert.ok(bodyPasses(deepest.tree, 64));
  tooDeep(`relation=artist&${joins(32)}relation=x`, `${joins(32)}relation`);
  tooDeep(`relation=artist&${joins(6000)}relation=x`, `${joins(6000)}relation`);
  // A join's where counts from the joined relation's level.
  tooDeep(`relation=artist&${joins(20)}where=${nots(30)}`, `${joins(20)}where`);
  // A smaller configured limit applies to every parameter.
  tooDeep(`relation=artist&join.a.on.x=y`, "join.a.on.x", 3);
  tooDeep(`relation=artist&where=${nots(5)}`, "where", 4);
  // Wide is not deep: 20,000 arguments parse (linear work: no slice of the rest per token).
  const wide = parseGetQuery(
    new URLSearchParams(`relation=artist&where=or(${Array(20_000).fill("eq(a,1)").join(",")})`),
  ).tree;
  assert.equal((wide.where as unknown[]).length, 20_001);
});

function nestedNot(n: number): unknown {
  let e: unknown = ["=", "a", 1];
  for (let i = 0; i < n; i++) e = ["not", e];
  return e;
}

Deno.test("GET: percent-encoded bytes that are not UTF-8 are 400, never U+FFFD", () => {
  const refused = (search: string, parameter: string) => {
    try {
      checkQueryString(search);
    } catch (e) {
      assert.ok(e instanceof SvcError);
      assert.equal(e.code, "QUERY_INVALID");
      assert.equal((e.details as { parameter: string }).parameter, parameter);
      return;
    }
    assert.fail(`no error for ${search}`);
  };
  refused("?relation=%ff%fe", "relation");
  refused("relation=artist&where=eq(name,%27%C3%27)", "where");
  refused("%ff=1", "%ff");
  refused("relation=artist&%ED%A0%80=1", "%ED%A0%80"); // a lone surrogate
  for (
    const ok of [
      "",
      "?relation=artist",
      "relation=artist&where=eq(name,%27%C3%A9t%C3%A9%27)",
      "relation=a+b&select=name",
      "relation=%F0%9F%98%80",
      "relation=album&where=like(title,'A%')", // a lone % is itself, as URLSearchParams reads it
      "relation=%zz",
    ]
  ) checkQueryString(ok);
});

Deno.test("stop the database", async () => {
  await sql.end();
  await stopDb();
});
