import assert from "node:assert/strict";
import { type Sql, sqlClient } from "../helpers/sql.ts";
import { compileRead } from "../../src/compile/sql.ts";
import type { Schema } from "../../src/db/schema.ts";
import { SvcError } from "../../src/svc_error.ts";
import {
  loadWellKnown,
  type Registry,
  resolveParams,
  type WellKnown,
} from "../../src/wellknown/registry.ts";
import { chinookDb, schemaOf, stopDb } from "../helpers/db.ts";

const MAX_DEPTH = 8;
const EXAMPLES = new URL("../../wellknown", import.meta.url).pathname;

let ctx: Promise<{ schema: Schema; sql: Sql }> | null = null;

/** Introspected Chinook and a connection to it (shared by every test of this file). */
function db(): Promise<{ schema: Schema; sql: Sql }> {
  ctx ??= (async () => {
    const uri = await chinookDb();
    return { schema: await schemaOf(uri), sql: sqlClient(uri) };
  })();
  return ctx;
}

const tempDirs: string[] = [];

/** Writes files (relative path → content; objects are written as JSON) into a fresh temp dir. */
async function tempDir(files: Record<string, string | unknown>): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "svc-wellknown-" });
  tempDirs.push(dir);
  for (const [rel, content] of Object.entries(files)) {
    const path = `${dir}/${rel}`;
    await Deno.mkdir(path.slice(0, path.lastIndexOf("/")), { recursive: true });
    await Deno.writeTextFile(
      path,
      typeof content === "string" ? content : JSON.stringify(content, null, 2),
    );
  }
  return dir;
}

async function load(
  files: Record<string, string | unknown>,
): Promise<{ reg: Registry; dir: string }> {
  const { schema } = await db();
  const dir = await tempDir(files);
  return { reg: await loadWellKnown(schema, dir, { maxDepth: MAX_DEPTH }), dir };
}

/** Resolves params, compiles and runs a well-known query; returns the JSON rows. */
async function run(wk: WellKnown, supplied?: unknown): Promise<unknown[]> {
  const { sql } = await db();
  const stmt = compileRead(wk.node, { params: resolveParams(wk, supplied) }).rows;
  const rows = await sql.unsafe(stmt.sql, stmt.params as unknown[]);
  return rows.map((r) => (typeof r.j === "string" ? JSON.parse(r.j) : r.j));
}

function throwsCode(fn: () => unknown, code: string): SvcError {
  let err: SvcError | undefined;
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof SvcError, `expected SvcError, got ${e}`);
    assert.equal(e.code, code, e.message);
    err = e;
    return true;
  });
  return err!;
}

function names(reg: Registry): string[] {
  return reg.list().map((q) => q.name);
}

/** A minimal valid definition reading one artist by id. */
function artistDef(name: string) {
  return {
    name,
    params: { id: { type: "integer" } },
    query: { relation: "artist", where: ["=", "artist_id", ["$param", "id", "integer"]] },
  };
}

Deno.test("registration: definitions in .json, .yaml, .yml and .huml, one or an array per file", async () => {
  const { reg } = await load({
    "one.json": artistDef("by_json"),
    "many.json": [artistDef("array_a"), artistDef("array_b")],
    "a.yaml": [
      "name: by_yaml",
      "params:",
      "  id: {type: integer}",
      "query:",
      "  relation: artist",
      '  where: ["=", artist_id, [$param, id, integer]]',
      "",
    ].join("\n"),
    "b.yml": [
      "- name: by_yml",
      "  params: {id: {type: integer}}",
      "  query:",
      "    relation: artist",
      '    where: ["=", artist_id, [$param, id, integer]]',
      "",
    ].join("\n"),
    "c.huml": [
      'name: "by_huml"',
      "params::",
      '  id:: type: "integer"',
      "query::",
      '  relation: "artist"',
      "  where::",
      '    - "="',
      '    - "artist_id"',
      "    - ::",
      '      - "$param"',
      '      - "id"',
      '      - "integer"',
      "",
    ].join("\n"),
    "UPPER.JSON": artistDef("upper_ext"),
    "notes.txt": "not a definition",
    "readme.md": "# nope",
  });
  assert.deepEqual(reg.warnings, []);
  assert.deepEqual(names(reg), [
    "array_a",
    "array_b",
    "by_huml",
    "by_json",
    "by_yaml",
    "by_yml",
    "upper_ext",
  ]);
  for (const name of names(reg)) {
    const wk = reg.get(name);
    assert.deepEqual(wk.params, { id: { type: "integer", required: true, default: undefined } });
    assert.deepEqual(await run(wk, { id: 1 }), [{ artist_id: 1, name: "AC/DC" }], name);
  }
  assert.match(reg.get("by_huml").file, /c\.huml$/);
  assert.match(reg.get("array_b").file, /many\.json$/);
});

Deno.test("registration: directories searched recursively; several colon-separated directories", async () => {
  const { schema } = await db();
  const a = await tempDir({
    "x/y/deep.json": artistDef("deep"),
    "top.yaml": JSON.stringify(artistDef("top")),
  });
  const b = await tempDir({ "other.json": artistDef("other") });
  const reg = await loadWellKnown(schema, `${a}:${b}:`, { maxDepth: MAX_DEPTH });
  assert.deepEqual(reg.warnings, []);
  assert.deepEqual(names(reg), ["deep", "other", "top"]);
  // The same directory twice does not make every name a duplicate.
  const twice = await loadWellKnown(schema, `${a}:${a}/`, { maxDepth: MAX_DEPTH });
  assert.deepEqual(twice.warnings, []);
  assert.deepEqual(names(twice), ["deep", "top"]);
});

Deno.test("registration: names starting with an underscore (files and directories) are skipped", async () => {
  const { reg } = await load({
    "kept.json": artistDef("kept"),
    "_draft.json": artistDef("kept"), // would be a duplicate if it were read
    "_broken.yaml": "{{{",
    "_drafts/inner.json": artistDef("inner_of_underscore_dir"),
    "sub/_x.huml": "not huml at all",
    "sub/ok.json": artistDef("nested_ok"),
    "sub/_sub/deeper.json": artistDef("deeper"),
    ".hidden.json": artistDef("hidden"),
  });
  assert.deepEqual(reg.warnings, []);
  assert.deepEqual(names(reg), ["kept", "nested_ok"]);
});

Deno.test("deactivation: a name declared twice deactivates every query of that name, naming both files", async () => {
  const { reg, dir } = await load({
    "one.json": [artistDef("dup"), artistDef("fine_one")],
    "sub/two.yaml": JSON.stringify(artistDef("dup")),
    "three.json": artistDef("fine_three"),
  });
  assert.deepEqual(names(reg), ["fine_one", "fine_three"]);
  assert.equal(reg.warnings.length, 1);
  const w = reg.warnings[0];
  assert.equal(w.name, "dup");
  assert.deepEqual(w.files.toSorted(), [`${dir}/one.json`, `${dir}/sub/two.yaml`]);
  assert.ok(
    w.message.includes(`${dir}/one.json`) && w.message.includes(`${dir}/sub/two.yaml`),
    w.message,
  );
  const e = throwsCode(() => reg.get("dup"), "WELL_KNOWN_UNKNOWN_QUERY");
  assert.equal(e.status, 404);
});

Deno.test("deactivation: a name declared twice in the same file", async () => {
  const { reg } = await load({
    "one.json": [artistDef("twice"), artistDef("twice"), artistDef("once")],
  });
  assert.deepEqual(names(reg), ["once"]);
  assert.equal(reg.warnings.length, 1);
  assert.equal(reg.warnings[0].name, "twice");
  assert.match(reg.warnings[0].message, /one\.json#\/0.*one\.json#\/1/);
});

Deno.test("deactivation: unparsable files deactivate the file's queries with a warning naming the file", async () => {
  const { reg, dir } = await load({
    "bad.json": '{"name": "x", ',
    "bad.yaml": "name: [unclosed\n",
    "bad.huml": 'name:"no space"\n',
    "empty.yaml": "",
    "scalar.json": "42",
    "good.json": artistDef("good"),
  });
  assert.deepEqual(names(reg), ["good"]);
  const files = reg.warnings.map((w) => w.files).flat().sort();
  assert.deepEqual(
    files,
    ["bad.huml", "bad.json", "bad.yaml", "empty.yaml", "scalar.json"].map((f) => `${dir}/${f}`),
  );
  for (const w of reg.warnings) {
    assert.equal(w.name, null);
    assert.ok(w.message.includes(w.files[0]), w.message);
  }
  throwsCode(() => reg.get("x"), "WELL_KNOWN_UNKNOWN_QUERY");
});

/** Loads one broken definition (plus a good one) and returns the warning about it. */
async function brokenDefinition(def: unknown): Promise<{ message: string; file: string }> {
  const { reg, dir } = await load({ "broken.json": def, "good.json": artistDef("good") });
  assert.deepEqual(names(reg), ["good"]);
  assert.equal(reg.warnings.length, 1, JSON.stringify(reg.warnings));
  const w = reg.warnings[0];
  assert.deepEqual(w.files, [`${dir}/broken.json`]);
  assert.ok(w.message.includes(`${dir}/broken.json`), w.message);
  const name = (def as { name?: unknown }).name;
  if (typeof name === "string" && name !== "") {
    assert.equal(w.name, name);
    throwsCode(() => reg.get(name), "WELL_KNOWN_UNKNOWN_QUERY");
  }
  return { message: w.message, file: w.files[0] };
}

Deno.test("deactivation: unknown relation", async () => {
  const { message } = await brokenDefinition({
    name: "nope",
    query: { relation: "no_such_table" },
  });
  assert.match(message, /"nope"/);
  assert.match(message, /QUERY_UNKNOWN_RELATION/);
  assert.match(message, /no_such_table/);
});

Deno.test("deactivation: unknown column and bad expression", async () => {
  assert.match(
    (await brokenDefinition({
      name: "col",
      query: { relation: "artist", where: ["=", "nope", 1] },
    })).message,
    /QUERY_UNKNOWN_COLUMN/,
  );
  assert.match(
    (await brokenDefinition({
      name: "expr",
      query: { relation: "artist", where: ["frobnicate", "name"] },
    }))
      .message,
    /"expr".*QUERY_INVALID/,
  );
});

Deno.test("deactivation: unknown param type", async () => {
  const { message } = await brokenDefinition({
    name: "badtype",
    params: { id: { type: "int4" } },
    query: { relation: "artist", where: ["=", "artist_id", ["$param", "id", "integer"]] },
  });
  assert.match(message, /param "id": unknown type "int4"/);
});

Deno.test("deactivation: reference to an undeclared param", async () => {
  const { message } = await brokenDefinition({
    name: "undeclared",
    params: { id: { type: "integer" } },
    query: { relation: "artist", where: ["=", "artist_id", ["$param", "other", "integer"]] },
  });
  assert.match(message, /other/);
});

Deno.test("deactivation: malformed definitions", async () => {
  const q = { relation: "artist" };
  const cases: [unknown, RegExp][] = [
    [{ params: {}, query: q }, /"name" is missing/],
    [{ name: "", query: q }, /"name" must be a non-empty string/],
    [{ name: 3, query: q }, /"name" must be a non-empty string/],
    [{ name: "noquery" }, /"query" is missing/],
    [{ name: "strquery", query: "artist" }, /"query" must be a Relation/],
    [{ name: "extra", query: q, parms: {} }, /unknown field "parms"/],
    [{ name: "params_list", params: ["id"], query: q }, /"params" must be an object/],
    [{ name: "notype", params: { id: {} }, query: q }, /param "id": "type" is missing/],
    [
      { name: "param_extra", params: { id: { type: "integer", dflt: 1 } }, query: q },
      /unknown field "dflt"/,
    ],
    [{ name: "bad_name", params: { "a.b": { type: "integer" } }, query: q }, /param name "a\.b"/],
    [
      { name: "bad_default", params: { n: { type: "integer", default: "ten" } }, query: q },
      /default "ten".*integer/,
    ],
  ];
  for (const [def, re] of cases) assert.match((await brokenDefinition(def)).message, re);
  // A non-object entry of an array file.
  const { reg } = await load({ "list.json": [artistDef("ok"), "oops"] });
  assert.deepEqual(names(reg), ["ok"]);
  assert.match(
    reg.warnings[0].message,
    /list\.json#\/1: a definition must be an object, got string/,
  );
});

Deno.test("deactivation: a missing directory is a warning, the others still load", async () => {
  const { schema } = await db();
  const dir = await tempDir({ "a.json": artistDef("a") });
  const reg = await loadWellKnown(schema, `/nonexistent/svc-wellknown:${dir}`, {
    maxDepth: MAX_DEPTH,
  });
  assert.deepEqual(names(reg), ["a"]);
  assert.equal(reg.warnings.length, 1);
  assert.deepEqual(reg.warnings[0].files, ["/nonexistent/svc-wellknown"]);
  assert.match(reg.warnings[0].message, /not found/);
});

Deno.test("registry: unknown and deactivated names are indistinguishable", async () => {
  const { reg } = await load({ "a.json": [artistDef("d"), artistDef("d")] });
  const a = throwsCode(() => reg.get("d"), "WELL_KNOWN_UNKNOWN_QUERY");
  const b = throwsCode(() => reg.get("never"), "WELL_KNOWN_UNKNOWN_QUERY");
  assert.equal(a.status, 404);
  assert.deepEqual(a.toJSON(), { ...b.toJSON(), message: a.message });
  assert.equal(a.message.replace('"d"', '"never"'), b.message);
});

/** A query over track exercising every param rule. */
const PARAMS_DEF = {
  name: "tracks",
  params: {
    album_id: { type: "integer" },
    genre_id: { type: "integer", default: null },
    max_ms: { type: "integer", default: 300000 },
    composer: { type: "string", default: null },
  },
  query: {
    relation: "track",
    select: ["track_id"],
    where: [
      "and",
      ["=", "album_id", ["$param", "album_id", "integer"]],
      [
        "or",
        ["is_null", ["$param", "genre_id", "integer"]],
        ["=", "genre_id", ["$param", "genre_id", "integer"]],
      ],
      ["<=", "milliseconds", ["$param", "max_ms", "integer"]],
      [
        "or",
        ["is_null", ["$param", "composer", "text"]],
        ["like", "composer", ["$param", "composer", "text"]],
      ],
    ],
    order_by: ["track_id"],
  },
};

async function ids(wk: WellKnown, supplied?: unknown): Promise<number[]> {
  return (await run(wk, supplied) as { track_id: number }[]).map((r) => r.track_id);
}

async function idsSql(where: string): Promise<number[]> {
  const { sql } = await db();
  return (await sql.unsafe(`select track_id from track where ${where} order by track_id`)).map((
    r,
  ) => r.track_id as number);
}

Deno.test("params: required, null default (SQL NULL), value default, supplied values", async () => {
  const { reg } = await load({ "tracks.json": PARAMS_DEF });
  assert.deepEqual(reg.warnings, []);
  const wk = reg.get("tracks");
  assert.deepEqual(wk.params, {
    album_id: { type: "integer", required: true, default: undefined },
    genre_id: { type: "integer", required: false, default: null },
    max_ms: { type: "integer", required: false, default: 300000 },
    composer: { type: "string", required: false, default: null },
  });
  const e = throwsCode(() => resolveParams(wk, {}), "WELL_KNOWN_PARAM_REQUIRED");
  assert.match(e.message, /"album_id"/);
  // Null defaults are SQL NULL (the is_null branches hold); max_ms defaults to 300000.
  assert.deepEqual(
    await ids(wk, { album_id: 1 }),
    await idsSql("album_id = 1 and milliseconds <= 300000"),
  );
  assert.deepEqual(await ids(wk, { album_id: 1, genre_id: null }), await ids(wk, { album_id: 1 }));
  assert.deepEqual(
    await ids(wk, { album_id: 1, max_ms: 10000000 }),
    await idsSql("album_id = 1"),
  );
  assert.deepEqual(
    await ids(wk, { album_id: 3, genre_id: 1, composer: "%Hammett%", max_ms: 10000000 }),
    await idsSql("album_id = 3 and genre_id = 1 and composer like '%Hammett%'"),
  );
  assert.deepEqual(await ids(wk, { album_id: 1, genre_id: 999 }), []);
});

Deno.test("params: type mismatch and unknown params are rejected before any SQL", async () => {
  const { reg } = await load({ "tracks.json": PARAMS_DEF });
  const wk = reg.get("tracks");
  let e = throwsCode(() => resolveParams(wk, { album_id: "1" }), "WELL_KNOWN_PARAM_TYPE_MISMATCH");
  assert.deepEqual(e.details, { param: "album_id", expected: "integer", got: "string" });
  e = throwsCode(
    () => resolveParams(wk, { album_id: 1, max_ms: 1.5 }),
    "WELL_KNOWN_PARAM_TYPE_MISMATCH",
  );
  assert.deepEqual(e.details, { param: "max_ms", expected: "integer", got: "number" });
  e = throwsCode(
    () => resolveParams(wk, { album_id: 1, composer: 7 }),
    "WELL_KNOWN_PARAM_TYPE_MISMATCH",
  );
  assert.deepEqual(e.details, { param: "composer", expected: "string", got: "integer" });
  e = throwsCode(() => resolveParams(wk, { album_id: 1, limit: 3 }), "QUERY_INVALID");
  assert.match(e.message, /"limit"/);
});

Deno.test("params: the cast defaults to jsonb; `type` never sets it", async () => {
  const { reg: ok } = await load({
    "j.json": {
      name: "by_ids",
      params: { ids: { type: "array", default: [1, 2] }, n: { type: "integer", default: 1 } },
      query: {
        relation: "artist",
        select: ["artist_id"],
        where: ["and", ["@>", ["$param", "ids"], ["$param", "n"]], [
          "@>",
          ["$param", "ids"],
          ["cast", ["cast", "artist_id", "text"], "jsonb"],
        ]],
        order_by: ["artist_id"],
      },
    },
  });
  assert.deepEqual(ok.warnings, []);
  const wk = ok.get("by_ids");
  const casts: string[] = [];
  JSON.stringify(wk.node.where, (k, v) => {
    if (v && typeof v === "object" && v.kind === "param") casts.push(`${v.name}:${v.cast}`);
    return k === "column" || k === "join" ? undefined : v;
  });
  assert.deepEqual(casts, ["ids:jsonb", "n:jsonb", "ids:jsonb"]);
  assert.deepEqual(await run(wk), [{ artist_id: 1 }, { artist_id: 2 }]);
  assert.deepEqual(await run(wk, { ids: [3, 5, 7], n: 5 }), [{ artist_id: 3 }, { artist_id: 5 }, {
    artist_id: 7,
  }]);
  assert.deepEqual(await run(wk, { ids: [3, 5, 7], n: 4 }), []);
});

Deno.test("examples: the shipped wellknown/ directory loads with no warnings and every query runs", async () => {
  const { schema, sql } = await db();
  const reg = await loadWellKnown(schema, EXAMPLES, { maxDepth: MAX_DEPTH });
  assert.deepEqual(reg.warnings, []);
  assert.deepEqual(names(reg), [
    "artist_albums",
    "invoice_lines",
    "top_customers",
    "tracks_by_genre",
  ]);
  const exts = new Set(names(reg).map((n) => reg.get(n).file.replace(/^.*\./, "")));
  assert.deepEqual([...exts].sort(), ["huml", "json", "yaml", "yml"]);

  // artist_albums: artist by id with albums and their tracks; artist_id required.
  throwsCode(() => resolveParams(reg.get("artist_albums"), {}), "WELL_KNOWN_PARAM_REQUIRED");
  const [acdc, ...rest] = await run(reg.get("artist_albums"), { artist_id: 1 }) as {
    name: string;
    albums: { title: string; tracks: { name: string }[] }[];
  }[];
  assert.equal(rest.length, 0);
  assert.equal(acdc.name, "AC/DC");
  assert.deepEqual(acdc.albums.map((a) => a.title), [
    "For Those About To Rock We Salute You",
    "Let There Be Rock",
  ]);
  assert.equal(acdc.albums[0].tracks.length, 10);
  assert.equal(acdc.albums[0].tracks[0].name, "For Those About To Rock (We Salute You)");

  // tracks_by_genre: at most 10, longest first; min_seconds defaults to 0.
  const jazz = await run(reg.get("tracks_by_genre"), { genre: "Jazz" }) as {
    genre: string;
    milliseconds: number;
    album: { title: string };
  }[];
  assert.equal(jazz.length, 10);
  assert.ok(jazz.every((t) => t.genre === "Jazz" && typeof t.album.title === "string"));
  assert.ok(jazz.every((t, i) => i === 0 || jazz[i - 1].milliseconds >= t.milliseconds));
  const long = await run(reg.get("tracks_by_genre"), { genre: "Jazz", min_seconds: 600 }) as {
    milliseconds: number;
  }[];
  const [{ m }] = await sql<
    { m: number }
  >`select count(*)::int as m from track join genre using (genre_id)
    where genre.name = 'Jazz' and milliseconds >= 600000`;
  assert.equal(long.length, Math.min(m, 10));
  assert.ok(long.every((t) => t.milliseconds >= 600000));
  throwsCode(
    () => resolveParams(reg.get("tracks_by_genre"), { genre: "Jazz", min_seconds: "600" }),
    "WELL_KNOWN_PARAM_TYPE_MISMATCH",
  );

  // top_customers: country optional (null = every country).
  const all = await run(reg.get("top_customers")) as { country: string; total_spent: number }[];
  assert.equal(all.length, 10);
  assert.ok(
    all.every((c, i) => i === 0 || Number(all[i - 1].total_spent) >= Number(c.total_spent)),
  );
  const de = await run(reg.get("top_customers"), { country: "Germany" }) as { country: string }[];
  assert.ok(de.length > 0 && de.every((c) => c.country === "Germany"));

  // invoice_lines: the lines of invoice 1 with track, album and artist.
  const lines = await run(reg.get("invoice_lines"), { invoice_id: 1 }) as {
    track: { name: string; album: { artist: { name: string } } };
  }[];
  const [{ n }] = await sql`select count(*)::int as n from invoice_line where invoice_id = 1`;
  assert.equal(lines.length, n);
  assert.equal(typeof lines[0].track.album.artist.name, "string");
});

Deno.test("teardown", async () => {
  for (const dir of tempDirs) await Deno.remove(dir, { recursive: true });
  if (ctx) await (await ctx).sql.end();
  await stopDb();
});
