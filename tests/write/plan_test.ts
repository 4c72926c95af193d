/** Unit tests of the pure write planner (no database). */
import assert from "node:assert/strict";
import fc from "fast-check";
import { parseQuery } from "../../src/compile/parse.ts";
import type { RelationNode } from "../../src/compile/ast.ts";
import { SvcError } from "../../src/svc_error.ts";
import { planWrite, type WritePlan } from "../../src/write/plan.ts";
import { cachedShapes, compileWrite, SHAPES_PER_QUERY } from "../../src/write/compile.ts";
import { fakeSchema } from "./fake_schema.ts";

const schema = fakeSchema();
const q = (tree: unknown): RelationNode =>
  parseQuery(schema, tree, { maxDepth: 6, pointer: "/query" });

const artistTree = (mode?: Record<string, string>) => ({
  relation: "artist",
  ...(mode?.artist ? { write_mode: mode.artist } : {}),
  join: {
    albums: {
      relation: "album",
      on: { artist_id: "artist_id" },
      ...(mode?.albums ? { write_mode: mode.albums } : {}),
      select: ["album_id", "title", "tracks"],
      join: {
        tracks: {
          relation: "track",
          on: { album_id: "album_id" },
          ...(mode?.tracks ? { write_mode: mode.tracks } : {}),
          select: ["track_id", "name", "milliseconds"],
        },
      },
    },
  },
  select: ["artist_id", "name", "albums"],
});

/** Runs `f`, expecting a SvcError with `code` (and `pointer` in details when given). */
function throwsSvc(f: () => unknown, code: string, pointer?: string): SvcError {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof SvcError, `expected SvcError, got ${e}`);
    assert.equal(e.code, code, e.message);
    if (pointer !== undefined) {
      assert.equal((e.details as { pointer?: string }).pointer, pointer, e.message);
    }
    return e;
  }
  assert.fail(`expected ${code}`);
}

function stepSummary(p: WritePlan): string[] {
  return p.steps.map((s) => `${s.kind} ${p.nodes[s.node].path.join(".") || "(root)"}`);
}

const tracks = (n: number, prefix: string) =>
  Array.from({ length: n }, (_, i) => ({ name: `${prefix}${i}`, milliseconds: 1000 + i }));

Deno.test("insert artist → albums → tracks: order, actions, fills from generated keys", () => {
  const data = [{
    name: "A",
    albums: [{ title: "X", tracks: tracks(3, "x") }, { title: "Y", tracks: tracks(3, "y") }],
  }];
  const p = planWrite(q(artistTree()), data);
  assert.deepEqual(stepSummary(p), ["insert (root)", "insert albums", "insert albums.tracks"]);
  assert.deepEqual(p.nodes.map((n) => [n.path, n.mode, n.rows.length]), [
    [[], "insert", 1],
    [["albums"], "merge", 2],
    [["albums", "tracks"], "merge", 6],
  ]);
  assert.ok(p.nodes.every((n) => n.rows.every((r) => r.action === "insert")));
  // Album rows take artist_id from the artist row 0 at run time; tracks from their album.
  assert.deepEqual(p.nodes[1].rows[1].fills, [{
    column: "artist_id",
    node: 0,
    row: 0,
    from: "artist_id",
  }]);
  assert.deepEqual(p.nodes[2].rows[4].fills, [{
    column: "album_id",
    node: 1,
    row: 1,
    from: "album_id",
  }]);
  assert.equal(p.nodes[2].rows[4].pointer, "/data/0/albums/1/tracks/1");
  // The artist insert returns its key (stored for the albums' statement); the identity key is
  // never in the column list.
  const sql = compileWrite(p).statements.map((s) => s.sql);
  assert.match(sql[0], /INSERT INTO "public"\."artist" AS t \("name"\) SELECT x\."name"/);
  assert.match(sql[0], /RETURNING t\."artist_id"::text AS "artist_id"\)/);
  assert.match(sql[0], /set_config\('svc\.w_0_0', coalesce\(array_agg\(w\."artist_id"\), /);
  assert.match(sql[1], /current_setting\('svc\.w_0_0'\)::text\[\]/);
});

Deno.test("1 and 1,000 child rows plan the same number of statements", () => {
  const plan = (n: number) =>
    planWrite(q(artistTree()), [{ name: "A", albums: [{ title: "X", tracks: tracks(n, "t") }] }]);
  const one = plan(1);
  const many = plan(1000);
  assert.equal(many.nodes[2].rows.length, 1000);
  assert.equal(one.steps.length, many.steps.length);
  const sql = (p: WritePlan) => compileWrite(p).statements.map((s) => s.sql);
  assert.deepEqual(sql(one), sql(many));
});

Deno.test("merge: update rows with key, insert rows without, delete omitted children first", () => {
  const tree = {
    relation: "album",
    write_mode: "merge",
    select: ["album_id", "title", "tracks"],
    join: {
      tracks: {
        relation: "track",
        on: { album_id: "album_id" },
        select: ["track_id", "name", "milliseconds"],
      },
    },
  };
  const p = planWrite(q(tree), [{
    album_id: 7,
    title: "T",
    tracks: [{ track_id: 70, name: "renamed" }, { name: "new", milliseconds: 5 }],
  }]);
  assert.deepEqual(stepSummary(p), [
    "delete tracks",
    "update (root)",
    "update tracks",
    "insert tracks",
  ]);
  assert.deepEqual(p.nodes[1].rows.map((r) => r.action), ["update", "insert"]);
  // The parent key is known: children get it statically.
  assert.equal(p.nodes[1].rows[1].value("album_id"), 7);
  assert.deepEqual(p.nodes[1].rows[1].fills, []);
  const del = p.steps[0];
  assert.equal(del.kind, "delete");
  if (del.kind === "delete") {
    assert.deepEqual(JSON.stringify(del.parents), JSON.stringify([{ album_id: 7 }]));
    assert.deepEqual(JSON.stringify(del.keep), JSON.stringify([{ track_id: 70 }]));
  }
});

Deno.test("merge: a child row with only its key is kept, not updated; root never deletes", () => {
  const p = planWrite(q({ ...artistTree({ artist: "merge" }) }), [{
    artist_id: 1,
    albums: [{ album_id: 2 }],
  }]);
  // The album row sets artist_id (filled from the parent): an update; the artist row only a key.
  assert.deepEqual(p.nodes.map((n) => n.rows.map((r) => r.action)), [["keep"], ["update"], []]);
  // The kept row is looked up: a key no row has is refused, as an update's is.
  assert.deepEqual(stepSummary(p), ["delete albums", "lookup (root)", "update albums"]);
});

Deno.test("deletes run deepest first", () => {
  const p = planWrite(q(artistTree({ artist: "merge" })), [{
    artist_id: 1,
    name: "n",
    albums: [{ album_id: 2, title: "t", tracks: [] }],
  }]);
  assert.deepEqual(stepSummary(p), [
    "delete albums.tracks",
    "delete albums",
    "update (root)",
    "update albums",
  ]);
});

Deno.test("merge-new: rows with key are kept unchanged; natural keys insert or keep", () => {
  const p = planWrite(q(artistTree({ artist: "merge", albums: "merge-new" })), [{
    artist_id: 1,
    albums: [{ album_id: 2, title: "changed?" }, { title: "new" }],
  }]);
  assert.deepEqual(p.nodes[1].rows.map((r) => r.action), ["keep", "insert"]);
  assert.deepEqual(stepSummary(p), [
    "delete albums",
    "lookup (root)",
    "insert albums",
    "lookup albums",
  ]);

  const pl = planWrite(
    q({
      relation: "playlist",
      write_mode: "merge",
      select: ["playlist_id", "tracks"],
      join: {
        tracks: {
          relation: "playlist_track",
          on: { playlist_id: "playlist_id" },
          write_mode: "merge-new",
          select: ["track_id"],
        },
      },
    }),
    [{ playlist_id: 3, tracks: [{ track_id: 1 }, { track_id: 2 }] }],
  );
  assert.deepEqual(pl.nodes[1].rows.map((r) => r.action), ["insert-or-keep", "insert-or-keep"]);
  assert.deepEqual(stepSummary(pl), ["delete tracks", "lookup (root)", "insert-or-keep tracks"]);
  const del = pl.steps[0];
  if (del.kind === "delete") {
    assert.deepEqual(
      JSON.stringify(del.keep),
      JSON.stringify([{ playlist_id: 3, track_id: 1 }, { playlist_id: 3, track_id: 2 }]),
    );
  }
});

Deno.test("upsert: on a natural unique key; on an identity key rows with key update", () => {
  const p = planWrite(
    q({
      relation: "tag",
      write_mode: "upsert",
      on_conflict: ["code"],
      select: ["tag_id", "code", "label"],
    }),
    [{ code: "a", label: "A" }, { tag_id: 9, code: "b" }],
  );
  assert.deepEqual(p.root.conflictColumns, ["code"]);
  assert.deepEqual(p.root.rows.map((r) => r.action), ["upsert", "upsert"]);
  assert.equal(p.steps.length, 2, "two column patterns: two statements");
  const upsert = compileWrite(p).statements[0].sql;
  assert.match(upsert, /ON CONFLICT \("code"\) DO UPDATE SET "label" = EXCLUDED\."label"/);
  // The tag_id (identity always) is never inserted.
  assert.doesNotMatch(upsert, /INSERT INTO "public"\."tag" AS t \([^)]*tag_id/);

  const byPk = planWrite(
    q({ relation: "tag", write_mode: "upsert", select: ["tag_id", "code", "label"] }),
    [
      { tag_id: 1, label: "x" },
      { code: "b" },
    ],
  );
  assert.deepEqual(byPk.root.rows.map((r) => r.action), ["update", "insert"]);
});

Deno.test("on_conflict must name the key or a unique constraint; its columns must be selected", () => {
  throwsSvc(
    () =>
      planWrite(
        q({
          relation: "tag",
          write_mode: "upsert",
          on_conflict: ["label"],
          select: ["tag_id", "label"],
        }),
        [],
      ),
    "QUERY_INVALID",
    "/query/on_conflict",
  );
  const e = throwsSvc(
    () =>
      planWrite(
        q({
          relation: "tag",
          write_mode: "upsert",
          on_conflict: ["code"],
          select: ["tag_id", "label"],
        }),
        [],
      ),
    "QUERY_NOT_WRITABLE",
  );
  assert.deepEqual((e.details as { missing: string[] }).missing, ["code"]);
});

Deno.test("readonly outgoing join links the parent's foreign key by the object's key", () => {
  const p = planWrite(
    q({
      relation: "track",
      select: ["track_id", "name", "milliseconds", "genre"],
      join: { genre: { relation: "genre", on: { genre_id: "genre_id" }, write_mode: "readonly" } },
    }),
    [{ name: "t", milliseconds: 1, genre: { genre_id: 4, name: "ignored" } }, {
      name: "u",
      milliseconds: 2,
      genre: null,
    }],
  );
  assert.equal(p.root.rows[0].value("genre_id"), 4);
  assert.equal(p.root.rows[1].value("genre_id"), null);
  assert.deepEqual(stepSummary(p), ["insert (root)"]);
  assert.equal(p.nodes[1].written, false);
  assert.deepEqual(p.nodes[1].rows.map((r) => r.action), ["link"]);
  throwsSvc(
    () =>
      planWrite(
        q({
          relation: "track",
          select: ["track_id", "name", "milliseconds", "genre"],
          join: {
            genre: { relation: "genre", on: { genre_id: "genre_id" }, write_mode: "readonly" },
          },
        }),
        [{ name: "t", milliseconds: 1, genre: { name: "Rock" } }],
      ),
    "QUERY_INVALID",
    "/data/0/genre",
  );
});

Deno.test("outgoing written join: the referenced row first, then the parent's foreign key from it", () => {
  const p = planWrite(
    q({
      relation: "album",
      select: ["album_id", "title", "artist"],
      join: { artist: { relation: "artist", on: { artist_id: "artist_id" } } },
    }),
    [{ title: "t", artist: { name: "new artist" } }, {
      title: "u",
      artist: { artist_id: 5, name: "renamed" },
    }],
  );
  assert.deepEqual(stepSummary(p), ["update artist", "insert artist", "insert (root)"]);
  assert.deepEqual(p.root.rows[0].fills, [{
    column: "artist_id",
    node: 1,
    row: 0,
    from: "artist_id",
  }]);
  assert.equal(p.root.rows[1].value("artist_id"), 5);
  // album.artist_id is NOT NULL: the object cannot be null.
  throwsSvc(
    () =>
      planWrite(
        q({
          relation: "album",
          select: ["album_id", "title", "artist"],
          join: { artist: { relation: "artist", on: { artist_id: "artist_id" } } },
        }),
        [{ title: "t", artist: null }],
      ),
    "QUERY_INVALID",
    "/data/0/artist",
  );
});

Deno.test("shape errors carry JSON pointers into data", () => {
  const node = q(artistTree());
  throwsSvc(() => planWrite(node, { name: "x" }), "QUERY_INVALID", "/data");
  throwsSvc(() => planWrite(node, [42]), "QUERY_INVALID", "/data/0");
  throwsSvc(
    () => planWrite(node, [{ name: "a", albums: [{ title: "x" }, { title: "y", bogus: 1 }] }]),
    "QUERY_INVALID",
    "/data/0/albums/1/bogus",
  );
  throwsSvc(
    () => planWrite(node, [{ name: "a", albums: { title: "x" } }]),
    "QUERY_INVALID",
    "/data/0/albums",
  );
  throwsSvc(
    () => planWrite(node, [{ name: "a", albums: [null] }]),
    "QUERY_INVALID",
    "/data/0/albums/0",
  );
  throwsSvc(() => planWrite(node, [{ "a/b~": 1 }], "/x"), "QUERY_INVALID", "/x/0/a~1b~0");
  throwsSvc(
    () =>
      planWrite(
        q({
          relation: "album",
          select: ["album_id", "title", "artist"],
          join: { artist: { relation: "artist", on: { artist_id: "artist_id" } } },
        }),
        [{ title: "t", artist: [] }],
      ),
    "QUERY_INVALID",
    "/data/0/artist",
  );
});

Deno.test("type pre-validation names the column", () => {
  const node = q({
    relation: "track",
    select: ["track_id", "name", "milliseconds", "unit_price", "tags", "meta", "created"],
  });
  const row = { name: "t", milliseconds: 1 };
  let e = throwsSvc(
    () => planWrite(node, [{ ...row, milliseconds: "long" }]),
    "QUERY_INVALID",
    "/data/0/milliseconds",
  );
  assert.match(e.message, /milliseconds/);
  throwsSvc(
    () => planWrite(node, [{ ...row, milliseconds: 1.5 }]),
    "QUERY_INVALID",
    "/data/0/milliseconds",
  );
  throwsSvc(
    () => planWrite(node, [{ ...row, milliseconds: 2 ** 40 }]),
    "QUERY_INVALID",
    "/data/0/milliseconds",
  );
  throwsSvc(() => planWrite(node, [{ ...row, name: { a: 1 } }]), "QUERY_INVALID", "/data/0/name");
  throwsSvc(() => planWrite(node, [{ ...row, name: null }]), "QUERY_INVALID", "/data/0/name");
  throwsSvc(
    () => planWrite(node, [{ ...row, unit_price: "x1" }]),
    "QUERY_INVALID",
    "/data/0/unit_price",
  );
  throwsSvc(
    () => planWrite(node, [{ ...row, tags: 5 }]),
    "QUERY_INVALID",
    "/data/0/tags",
  );
  e = throwsSvc(
    () => planWrite(node, [{ ...row, created: 5 }]),
    "QUERY_INVALID",
    "/data/0/created",
  );
  assert.match(e.message, /created/);
  // Accepted: numeric as string, arrays, any JSON for jsonb, integers as digit strings.
  const ok = planWrite(node, [{
    ...row,
    milliseconds: "12",
    unit_price: "0.99",
    tags: ["a"],
    meta: { x: [1] },
  }]);
  assert.equal(ok.root.rows[0].value("unit_price"), "0.99");
});

Deno.test("get items are ignored on write, set items written; generated columns ignored", () => {
  const node = q({
    relation: "track",
    select: {
      id: "track_id",
      name: ["get", "name"],
      title: ["set", "name"],
      ms: "milliseconds",
      len: "name_len",
    },
  });
  const p = planWrite(node, [{ name: "read only", title: "written", ms: 3, len: 99 }]);
  assert.equal(p.root.rows[0].value("name"), "written");
  assert.deepEqual([...p.root.rows[0].writes].sort(), ["milliseconds", "name"]);
  // A get-marked mandatory column cannot feed an insert.
  throwsSvc(
    () =>
      planWrite(
        q({
          relation: "track",
          select: { id: "track_id", name: ["get", "name"], ms: "milliseconds" },
        }),
        [
          { name: "x", ms: 1 },
        ],
      ),
    "QUERY_MANDATORY_COLUMN_MISSING",
    "/data/0",
  );
});

Deno.test("a column given twice under two names must agree", () => {
  const node = q({ relation: "artist", select: { artist_id: "artist_id", a: "name", b: "name" } });
  assert.equal(planWrite(node, [{ a: "x", b: "x" }]).root.rows[0].value("name"), "x");
  throwsSvc(() => planWrite(node, [{ a: "x", b: "y" }]), "QUERY_INVALID", "/data/0/b");
});

Deno.test("rule 5: a written relation's select must contain its key", () => {
  const e = throwsSvc(
    () =>
      planWrite(
        q({
          relation: "artist",
          select: ["artist_id", "name", "albums"],
          join: {
            albums: { relation: "album", on: { artist_id: "artist_id" }, select: ["title"] },
          },
        }),
        [],
      ),
    "QUERY_NOT_WRITABLE",
    "/query/join/albums",
  );
  assert.match(e.message, /public\.album.*album_id/);
  // Decided by the query alone, before any row is looked at: a payload of a million rows (or a
  // malformed one) costs nothing to refuse.
  throwsSvc(
    () => planWrite(q({ relation: "artist", select: ["name"] }), [42, ...Array(1e6).fill({})]),
    "QUERY_NOT_WRITABLE",
    "/query",
  );
  // Readonly joins need no key; foreign keys filled by a join count as selected.
  planWrite(
    q({
      relation: "artist",
      write_mode: "merge",
      select: ["artist_id", "albums"],
      join: {
        albums: {
          relation: "album",
          on: { artist_id: "artist_id" },
          select: ["title"],
          write_mode: "readonly",
        },
      },
    }),
    [{ artist_id: 1, albums: [{ title: "x" }] }],
  );
  planWrite(
    q({
      relation: "playlist",
      select: ["playlist_id", "tracks"],
      join: {
        tracks: {
          relation: "playlist_track",
          on: { playlist_id: "playlist_id" },
          select: ["track_id"],
        },
      },
    }),
    [],
  );
});

Deno.test("views without key and materialized views are not writable", () => {
  throwsSvc(() => planWrite(q({ relation: "album_view" }), []), "QUERY_NOT_WRITABLE", "/query");
});

Deno.test("mandatory columns: missing → error with pointer; filled foreign keys count", () => {
  const e = throwsSvc(
    () =>
      planWrite(q(artistTree()), [{
        name: "a",
        albums: [{ title: "x", tracks: [{ name: "t" }] }],
      }]),
    "QUERY_MANDATORY_COLUMN_MISSING",
    "/data/0/albums/0/tracks/0",
  );
  assert.deepEqual((e.details as { column: string }).column, "milliseconds");
  throwsSvc(
    () => planWrite(q({ relation: "album", select: ["album_id", "title"] }), [{ title: "x" }]),
    "QUERY_MANDATORY_COLUMN_MISSING",
    "/data/0",
  );
});

Deno.test("insert mode rejects a row carrying a GENERATED ALWAYS key; a null key means new", () => {
  throwsSvc(
    () =>
      planWrite(q({ relation: "artist", select: ["artist_id", "name"] }), [{
        artist_id: 3,
        name: "x",
      }]),
    "QUERY_INVALID",
    "/data/0/artist_id",
  );
  const p = planWrite(q({ relation: "artist", select: ["artist_id", "name"] }), [{
    artist_id: null,
    name: "x",
  }]);
  assert.equal(p.root.rows[0].action, "insert");
});

Deno.test("a filtered merge join that would delete is not writable", () => {
  const tree = artistTree({ artist: "merge" });
  (tree.join.albums as Record<string, unknown>).where = ["like", "title", ["A%"]];
  throwsSvc(
    () => planWrite(q(tree), [{ artist_id: 1, albums: [] }]),
    "QUERY_NOT_WRITABLE",
    "/query/join/albums",
  );
  // Inserting a new artist deletes nothing: fine.
  planWrite(q(tree), [{ name: "n", albums: [] }]);
});

Deno.test("readonly root and readonly incoming joins write nothing under them", () => {
  const p = planWrite(q({ ...artistTree(), write_mode: "readonly" }), [{
    artist_id: 1,
    albums: [{ title: "x" }],
  }]);
  assert.deepEqual(p.steps, []);
  assert.equal(p.root.written, false);
  assert.equal(p.nodes.length, 1);
  throwsSvc(
    () =>
      planWrite(q({ ...artistTree(), write_mode: "readonly" }), [{
        artist_id: 1,
        albums: [{ zz: 1 }],
      }]),
    "QUERY_INVALID",
    "/data/0/albums/0/zz",
  );
});

Deno.test("planWrite works on a hand-built RelationNode (no parser)", () => {
  const artist = schema.relations.get("public.artist")!;
  const node: RelationNode = {
    source: { kind: "relation", relation: artist },
    sqlAlias: "t0",
    name: "artist",
    where: null,
    select: artist.columns.map((column) => ({
      name: column.name,
      value: { kind: "expr", expr: { kind: "column", scope: "t0", column } },
      mode: "both",
    })),
    joins: [],
    limit: null,
    offset: null,
    orderBy: [],
    distinctOn: [],
    writeMode: "insert",
    onConflict: null,
    pointer: "",
    depth: 0,
  };
  const p = planWrite(node, [{ name: "a" }, { name: "b" }]);
  assert.deepEqual(stepSummary(p), ["insert (root)"]);
});

// ---------------------------------------------------------------------------------------------
// Fuzzing: whatever the payload, planWrite returns a plan or throws SvcError.

const keyNames = fc.constantFrom(
  "artist_id",
  "name",
  "albums",
  "album_id",
  "title",
  "tracks",
  "track_id",
  "milliseconds",
  "genre",
  "genre_id",
  "zz",
  "__proto__",
  "constructor",
);
const jsonish = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    fc.double(),
    fc.string(),
    fc.array(tie("value"), { maxLength: 3 }),
    fc.dictionary(keyNames, tie("value"), { maxKeys: 5 }),
    fc.constant(undefined),
    fc.constant(Number.NaN),
  ),
}));

Deno.test("fuzz: only SvcError escapes planWrite", () => {
  const trees = [
    artistTree(),
    artistTree({ artist: "merge", albums: "merge-new" }),
    artistTree({ artist: "upsert", tracks: "insert" }),
    {
      relation: "track",
      write_mode: "merge",
      select: ["track_id", "name", "milliseconds", "genre", "album"],
      join: {
        genre: { relation: "genre", on: { genre_id: "genre_id" }, write_mode: "readonly" },
        album: { relation: "album", on: { album_id: "album_id" }, select: ["album_id", "title"] },
      },
    },
  ].map(q);
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: trees.length - 1 }),
      fc.array(jsonish.value, { maxLength: 4 }),
      (t, data) => {
        try {
          planWrite(trees[t], data);
        } catch (e) {
          if (!(e instanceof SvcError)) throw e;
        }
      },
    ),
    { numRuns: 3000 },
  );
  fc.assert(
    fc.property(jsonish.value, (data) => {
      try {
        planWrite(trees[0], data);
      } catch (e) {
        if (!(e instanceof SvcError)) throw e;
      }
    }),
    { numRuns: 500 },
  );
});

Deno.test("statement texts are cached per query and payload shape", () => {
  const node = q(artistTree());
  const sql = (data: unknown) => compileWrite(planWrite(node, data)).statements.map((s) => s.sql);
  assert.equal(cachedShapes(node), 0);
  const a = sql([{ name: "A", albums: [{ title: "X", tracks: tracks(2, "a") }] }]);
  const b = sql([{ name: "B", albums: [{ title: "Y", tracks: tracks(7, "b") }, { title: "Z" }] }]);
  assert.deepEqual(a, b, "same shape: the same statements");
  assert.equal(cachedShapes(node), 1);
  // Another shape (no tracks: two statements; a column fewer: other texts) is cached apart.
  const c = sql([{ name: "C", albums: [{ title: "X" }] }]);
  assert.equal(c.length, 2);
  const d = sql([{ name: "D", albums: [{ album_id: 5, title: "U", tracks: tracks(1, "d") }] }]);
  assert.notDeepEqual(d, a);
  assert.ok(d.some((t) => /^WITH x AS .*\(UPDATE "public"\."album"/.test(t)));
  assert.equal(cachedShapes(node), 3);
  // A cached shape gives what compiling afresh gives (a new tree: nothing cached on it).
  const fresh = q(artistTree());
  const again = compileWrite(
    planWrite(fresh, [{ name: "A", albums: [{ title: "X", tracks: tracks(2, "a") }] }]),
  ).statements.map((s) => s.sql);
  assert.deepEqual(again, a);
  // Bounded per query.
  for (let i = 0; i < SHAPES_PER_QUERY + 5; i++) {
    sql([{ name: "n", albums: Array.from({ length: i + 1 }, () => ({ title: "t" })) }]);
    sql([{ albums: [{ title: "t", tracks: [{ name: "x", milliseconds: i }] }] }]);
  }
  assert.ok(cachedShapes(node) <= SHAPES_PER_QUERY);
});

Deno.test("a one-row root insert has no sort; a root of more rows and children keep theirs", () => {
  const node = q(artistTree());
  const sql = (data: unknown) => compileWrite(planWrite(node, data)).statements.map((s) => s.sql);
  const one = sql([{ name: "A", albums: [{ title: "X", tracks: tracks(1, "a") }] }]);
  assert.ok(!one[0].includes("ORDER BY"), one[0]);
  assert.ok(one[1].includes(`ORDER BY x."@o"`) && one[2].includes(`ORDER BY x."@o"`));
  const two = sql([{ name: "A", albums: [{ title: "X", tracks: tracks(3, "b") }] }, { name: "B" }]);
  assert.ok(two[0].includes(`ORDER BY x."@o"`), two[0]);
  assert.deepEqual(two.slice(1), one.slice(1), "a child's text does not depend on its row count");
});
