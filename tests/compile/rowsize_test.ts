/**
 * The row-size cap (src/compile/rowsize.ts) on a real PostgreSQL: a read whose rows are bounded
 * by their columns' types carries that bound, which no row of the worst data exceeds; such a read
 * runs without the cap's wrapper when the cap is at or above the bound, and with it (refusing an
 * oversized row) below; the wrapper's fence builds each row's object once.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, schemaOf, stopDb } from "../helpers/db.ts";
import { FIXTURE_SQL } from "./fixture.ts";
import { parseQuery } from "../../src/compile/parse.ts";
import { compileRead } from "../../src/compile/sql.ts";
import { capRowSize, rowTooLarge } from "../../src/compile/rowsize.ts";
import type { Statement } from "../../src/compile/ast.ts";

/** Every built-in type the bound knows, with the longest JSON texts they can produce. */
const BOUNDED_SQL = `
create table bounded (
  id int primary key, b boolean, s smallint, big bigint, o oid, r real, d double precision,
  u uuid, dt date, t time, tz timetz, ts timestamp, tstz timestamptz, n numeric(5,2),
  n0 numeric(3), ns numeric(1,3), c character(3), v character varying(4), parent int references bounded (id)
);
insert into bounded values
  (1, false, -32768, -9223372036854775808, 4294967295, '-Infinity', -1.2345678901234567e-300,
   '00000000-0000-0000-0000-000000000000', '-infinity', '23:59:59.999999',
   '23:59:59.999999-15:59', '-infinity', '-infinity', -999.99, -999, -0.009, e'\\x01\\x02\\x03',
   e'\\x01"\\\\\\x1f', null),
  (2, true, 32767, 9223372036854775807, 0, -3.4028235e38, -1.7976931348623157e308,
   'ffffffff-ffff-ffff-ffff-ffffffffffff', '5874897-12-31', '24:00:00', '00:00:00+15:59',
   '294276-12-31 23:59:59.999999', '294276-12-30 23:59:59.999999+00', 'NaN', 999, 0.009,
   '€€€', '𝄞𝄞𝄞𝄞', 1),
  (3, null, null, null, null, 'NaN', 'Infinity', null, '4713-01-01 BC', null, null,
   '4713-01-01 00:00:00 BC', '4713-01-01 00:00:00+00 BC', null, null, null, null, null, 2);
`;

const uri = await chinookDb("rowsize", FIXTURE_SQL + BOUNDED_SQL);
const schema = await schemaOf(uri);
const sql = sqlClient(uri);

function compile(tree: unknown): Statement {
  return compileRead(parseQuery(schema, tree, { maxDepth: 6 })).rows;
}

/** The largest `j` text, in bytes, the statement produces. */
async function largest(stmt: Statement): Promise<number> {
  const rows = await sql.unsafe(
    `SELECT max(octet_length("b"."j"::text)) AS "n" FROM (${stmt.sql}) AS "b"`,
    stmt.params as never[],
  );
  return Number(rows[0].n);
}

Deno.test("a read of bounded columns carries a bound no row of the worst data exceeds", async () => {
  const trees: unknown[] = [
    { relation: "bounded" }, // every column: row_to_json
    { relation: "bounded", select: ["v", "c", "n", "ts", "id"] }, // json_build_object
    {
      relation: "bounded",
      select: { 'k\u0001"ey': "v", "€": "c" }, // keys that need escaping
    },
    {
      relation: "bounded",
      select: ["id", "v", "up"],
      join: { up: { relation: "bounded", on: { id: "parent" } } }, // outgoing join: an object
    },
    { relation: "wide" }, // 61 columns: json_object_agg
    { relation: "track", where: ["=", "track_id", 1] },
  ];
  for (const tree of trees) {
    const stmt = compile(tree);
    assert.equal(typeof stmt.maxRowBytes, "number", JSON.stringify(tree));
    const size = await largest(stmt);
    assert.ok(size > 0 && size <= stmt.maxRowBytes!, `${JSON.stringify(tree)}: ${size} bytes`);
  }
});

Deno.test("a read of text, arrays, json or an incoming join carries no bound", () => {
  for (
    const tree of [
      { relation: "doc" }, // text, arrays, jsonb, an enum, a composite
      {
        relation: "genre",
        select: ["genre_id", "tracks"],
        join: { tracks: { relation: "track", on: { genre_id: "genre_id" } } }, // an array
      },
      { relation: "bounded", select: { x: ["+", "id", 1] } }, // an expression
      { relation: "doc", select: ["id", "title"] }, // text
    ]
  ) {
    assert.equal(compile(tree).maxRowBytes, undefined, JSON.stringify(tree));
  }
});

Deno.test("capRowSize: no wrapper when no row can exceed the cap, the wrapper below the bound", async () => {
  const stmt = compile({ relation: "track", where: ["=", "track_id", 1] });
  const bound = stmt.maxRowBytes!;
  assert.equal(capRowSize(stmt, bound).sql, stmt.sql);
  assert.equal(capRowSize(stmt, 64 * 1024 * 1024).sql, stmt.sql);
  // Below the bound the cap stays, and it still refuses a row over it.
  const actual = await largest(stmt);
  const exact = capRowSize(stmt, actual);
  assert.match(exact.sql, /pg_column_size/);
  assert.equal((await sql.unsafe(exact.sql, exact.params as never[])).length, 1);
  const under = capRowSize(stmt, actual - 1);
  const e = await sql.unsafe(under.sql, under.params as never[]).then(
    () => null,
    (e: { code?: string; message?: string }) => e,
  );
  assert.ok(e, "a row one byte over the cap is refused");
  assert.equal(rowTooLarge(e), actual);
});

Deno.test("capRowSize: each row's object is built once (the read is a fence), with or without an OFFSET", async () => {
  const base = {
    relation: "album",
    select: ["album_id", "title", "tracks"],
    join: { tracks: { relation: "track", on: { album_id: "album_id" }, select: ["name"] } },
  };
  for (
    const tree of [
      { ...base, where: ["=", "album_id", 1] },
      { ...base, where: ["<=", "album_id", 5], order_by: ["album_id"] },
      { ...base, order_by: ["album_id"], limit: 3, offset: 2 },
    ]
  ) {
    const stmt = compile(tree);
    const capped = capRowSize(stmt, 1000);
    const plan = await sql.unsafe(
      `EXPLAIN (VERBOSE, FORMAT JSON) ${capped.sql}`,
      capped.params as never[],
    );
    // The cap's CASE reads the object from the fenced subquery's column; pulled up, it would
    // repeat the object's whole expression (built once per reference).
    const top = (plan[0]["QUERY PLAN"] as { Plan: { Output: string[] } }[])[0].Plan.Output[0];
    assert.match(top, /pg_column_size\(svc_r\.j\)/, JSON.stringify(tree));
    assert.doesNotMatch(top, /json_build_object/, JSON.stringify(tree));
    const rows = await sql.unsafe(capped.sql, capped.params as never[]).catch((e) => e);
    const plain = await sql.unsafe(stmt.sql, stmt.params as never[]);
    if (Array.isArray(rows)) assert.deepEqual(rows, plain);
    else assert.ok(rowTooLarge(rows) !== null, String(rows));
  }
});

Deno.test("stop the database", async () => {
  await sql.end();
  await stopDb();
});
