/**
 * Rows as records (docs/performance.md, "Rows as records"): a read's rows are built by `to_json`
 * of a subquery's record whose columns are the output keys, where every key can be a column name;
 * other keys fall back to json_build_object. Either way the answer has exactly the requested keys,
 * in select order, with the values json_build_object gives. Run against a real PostgreSQL.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, schemaOf, stopDb } from "../helpers/db.ts";
import { parseQuery } from "../../src/compile/parse.ts";
import { compileRead, shapeKey } from "../../src/compile/sql.ts";
import type { Statement } from "../../src/compile/ast.ts";

const uri = await chinookDb();
const schema = await schemaOf(uri);
const sql = sqlClient(uri);

/** Keys a record can carry: quotes, case, spaces, system column names, 63 bytes exactly. */
const RECORD_KEYS = [
  "plain",
  "Mixed Case",
  'q"uo"te',
  " lead and trail ",
  "ctid",
  "*",
  "x".repeat(63),
  "€".repeat(21), // 63 bytes
  "🎵 note",
];
/** Keys that cannot be a column name: each forces the json_build_object form. */
const OBJECT_KEYS = ["", "x".repeat(64), "€".repeat(22) /* 66 bytes */];

/** The answer rows as text (key order kept) and the compiled statement. */
async function answer(tree: unknown): Promise<{ rows: string[]; stmt: Statement }> {
  const stmt = compileRead(parseQuery(schema, tree, { maxDepth: 6 })).rows;
  // A NUL cannot travel in statement text: the test binds nothing but svc's own parameters.
  const rows = await sql.unsafe<{ t: string }>(
    `SELECT "q"."j"::text AS "t" FROM (${stmt.sql}) AS "q"`,
    stmt.params as never[],
  );
  return { rows: rows.map((r) => r.t), stmt };
}

/** Key names of a JSON object's text, in order (JSON.parse would reorder integer-like keys). */
function keysOf(text: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  const re = /"((?:[^"\\]|\\.)*)"\s*:|[{}[\]]/g;
  for (const m of text.matchAll(re)) {
    if (m[0] === "{" || m[0] === "[") depth++;
    else if (m[0] === "}" || m[0] === "]") depth--;
    else if (depth === 1) keys.push(JSON.parse(`"${m[1]}"`));
  }
  return keys;
}

/** A select mapping each key to a track column, cycling through them. */
function selectOf(keys: string[]): Record<string, string> {
  const cols = ["track_id", "name", "unit_price", "composer", "milliseconds"];
  return Object.fromEntries(keys.map((k, i) => [k, cols[i % cols.length]]));
}

/** The reference: the same values by hand-written json_build_object, keys bound. */
async function reference(keys: string[], where: string): Promise<unknown[]> {
  const cols = ["track_id", "name", "unit_price", "composer", "milliseconds"];
  const pairs = keys.map((_, i) => `$${i + 1}::text, t.${cols[i % cols.length]}`).join(", ");
  const rows = await sql.unsafe<{ t: string }>(
    `SELECT json_build_object(${pairs})::text AS t FROM track t WHERE ${where} ORDER BY t.track_id`,
    keys,
  );
  return rows.map((r) => JSON.parse(r.t));
}

Deno.test("rows as records: every key a column name can carry, in order, same values", async () => {
  const got = await answer({
    relation: "track",
    select: selectOf(RECORD_KEYS),
    where: ["<=", "track_id", 5],
    order_by: ["track_id"],
  });
  assert.match(got.stmt.sql, /^SELECT to_json\(/);
  assert.doesNotMatch(got.stmt.sql, /json_build_object/);
  assert.equal(got.rows.length, 5);
  for (const row of got.rows) assert.deepEqual(keysOf(row), RECORD_KEYS);
  assert.deepEqual(
    got.rows.map((r) => JSON.parse(r)),
    await reference(RECORD_KEYS, "t.track_id <= 5"),
  );
});

Deno.test("rows as records: a key no column name can carry falls back to json_build_object", async () => {
  for (const odd of OBJECT_KEYS) {
    const keys = ["plain", odd, "other"];
    const got = await answer({
      relation: "track",
      select: selectOf(keys),
      where: ["<=", "track_id", 3],
      order_by: ["track_id"],
    });
    assert.match(got.stmt.sql, /^SELECT json_build_object\(/, JSON.stringify(odd));
    assert.doesNotMatch(got.stmt.sql, /to_json\(/);
    for (const row of got.rows) assert.deepEqual(keysOf(row), keys, JSON.stringify(odd));
    assert.deepEqual(got.rows.map((r) => JSON.parse(r)), await reference(keys, "t.track_id <= 3"));
  }
});

Deno.test("rows as records: a key with a NUL stays a bound value PostgreSQL refuses", async () => {
  const keys = ["plain", "nul\u0000key"];
  const tree = { relation: "track", select: selectOf(keys), where: ["=", "track_id", 1] };
  const stmt = compileRead(parseQuery(schema, tree, { maxDepth: 6 })).rows;
  assert.ok(!stmt.sql.includes("\u0000"), "no NUL in the statement text");
  assert.ok(stmt.params.includes("nul\u0000key"));
  await assert.rejects(answer(tree), (e: { code?: string }) => e.code === "22021");
  // The connection is still usable: the refusal was PostgreSQL's, not a broken message.
  assert.equal((await answer({ ...tree, select: selectOf(["plain"]) })).rows.length, 1);
});

Deno.test("rows as records: incoming and outgoing joins, nested, ordered and limited", async () => {
  const got = await answer({
    relation: "album",
    select: { "Album id": "album_id", "title": "title", "the artist": "artist", "its tracks": "t" },
    where: ["<=", "album_id", 4],
    order_by: ["album_id"],
    join: {
      artist: {
        relation: "artist",
        on: { artist_id: "artist_id" },
        select: { "Artist": "name" },
      },
      t: {
        relation: "track",
        on: { album_id: "album_id" },
        select: { "#": "track_id", "Name": "name" },
        order_by: [["desc", "track_id"]],
        limit: 2,
      },
    },
  });
  assert.doesNotMatch(got.stmt.sql, /json_build_object/);
  const expected = await sql.unsafe<{ t: string }>(`
    SELECT json_build_object('Album id', al.album_id, 'title', al.title,
      'the artist', (SELECT json_build_object('Artist', ar.name) FROM artist ar
                     WHERE ar.artist_id = al.artist_id),
      'its tracks', coalesce((SELECT json_agg(json_build_object('#', s.track_id, 'Name', s.name)
                                              ORDER BY s.track_id DESC)
                              FROM (SELECT * FROM track t WHERE t.album_id = al.album_id
                                    ORDER BY t.track_id DESC LIMIT 2) s), '[]'))::text AS t
    FROM album al WHERE al.album_id <= 4 ORDER BY al.album_id`);
  assert.deepEqual(got.rows.map((r) => JSON.parse(r)), expected.map((r) => JSON.parse(r.t)));
  for (const row of got.rows) {
    assert.deepEqual(keysOf(row), ["Album id", "title", "the artist", "its tracks"]);
    const parsed = JSON.parse(row);
    assert.deepEqual(Object.keys(parsed["the artist"]), ["Artist"]);
    for (const t of parsed["its tracks"]) assert.deepEqual(Object.keys(t), ["#", "Name"]);
  }
});

Deno.test("rows as records: a whole row, plain or sorted; distinct_on stays in the subquery", async () => {
  const whole = await answer({ relation: "genre", where: ["<=", "genre_id", 2] });
  assert.match(whole.stmt.sql, /^SELECT row_to_json\("t0"\.\*\) AS "j" FROM/);
  assert.deepEqual(whole.rows.map((r) => JSON.parse(r)), [
    { genre_id: 1, name: "Rock" },
    { genre_id: 2, name: "Jazz" },
  ]);
  // Sorted and limited, the whole row is the subquery's `alias.*`.
  const sorted = await answer({ relation: "genre", order_by: [["desc", "name"]], limit: 2 });
  assert.match(sorted.stmt.sql, /^SELECT to_json\("t0_r"\.\*\) AS "j" FROM \(SELECT "t0"\.\* FROM/);
  assert.deepEqual(sorted.rows.map((r) => JSON.parse(r)), [
    { genre_id: 16, name: "World" },
    { genre_id: 19, name: "TV Shows" },
  ]);
  const distinct = await answer({
    relation: "track",
    select: { "the album": "album_id", "first": "track_id" },
    where: ["<=", "album_id", 3],
    distinct_on: ["album_id"],
    order_by: ["album_id", "track_id"],
  });
  assert.deepEqual(distinct.rows.map((r) => JSON.parse(r)), [
    { "the album": 1, "first": 1 },
    { "the album": 2, "first": 2 },
    { "the album": 3, "first": 3 },
  ]);
});

Deno.test("an ordered, limited read builds JSON only for the rows it returns", async () => {
  for (
    const tree of [
      { relation: "track", select: ["track_id", "name"], order_by: ["name"], limit: 3 },
      {
        relation: "album",
        select: ["album_id", "t"],
        where: ["=", "album_id", 1],
        join: {
          t: {
            relation: "track",
            on: { album_id: "album_id" },
            select: ["track_id", "name"],
            order_by: ["name"],
            limit: 2,
          },
        },
      },
    ]
  ) {
    const stmt = compileRead(parseQuery(schema, tree, { maxDepth: 6 })).rows;
    const [{ "QUERY PLAN": plan }] = await sql.unsafe<{ "QUERY PLAN": unknown }>(
      `EXPLAIN (VERBOSE, FORMAT JSON) ${stmt.sql}`,
      stmt.params as never[],
    );
    // Every Sort and Limit node passes plain columns: the row's JSON is made above them.
    const below: string[] = [];
    const walk = (n: Record<string, unknown>) => {
      if (n["Node Type"] === "Sort" || n["Node Type"] === "Limit") {
        below.push(...(n["Output"] as string[]));
      }
      for (const p of (n["Plans"] as Record<string, unknown>[] | undefined) ?? []) walk(p);
      for (const p of (n["Subplans"] as Record<string, unknown>[] | undefined) ?? []) walk(p);
    };
    walk((plan as { Plan: Record<string, unknown> }[])[0].Plan);
    assert.ok(below.length > 0, JSON.stringify(plan));
    for (const out of below) assert.doesNotMatch(out, /json/, `${out} in ${stmt.sql}`);
  }
});

Deno.test("two reads that differ only in a key have different shapes and SQL", () => {
  const a = parseQuery(schema, { relation: "track", select: { a: "name" } }, { maxDepth: 6 });
  const b = parseQuery(schema, { relation: "track", select: { b: "name" } }, { maxDepth: 6 });
  assert.notEqual(shapeKey(a), shapeKey(b));
  assert.notEqual(compileRead(a).rows.sql, compileRead(b).rows.sql);
});

Deno.test("stop the database", async () => {
  await sql.end();
  await stopDb();
});
