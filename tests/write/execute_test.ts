/**
 * Integration tests of planWrite + compileWrite + executeWrite against a private PostgreSQL with
 * Chinook: one statement per relation and level, all pipelined in the test's transaction.
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { type Sql, sqlClient } from "../helpers/sql.ts";
import { parseQuery } from "../../src/compile/parse.ts";
import { compileRead } from "../../src/compile/sql.ts";
import type { Schema } from "../../src/db/schema.ts";
import type { Tx } from "../../src/db/tx.ts";
import { SvcError } from "../../src/svc_error.ts";
import { executeWrite, type WriteOptions, type WriteResult } from "../../src/write/execute.ts";
import { planWrite } from "../../src/write/plan.ts";
import { compileWrite } from "../../src/write/compile.ts";
import { chinookDb, schemaOf, stopDb } from "../helpers/db.ts";
import { svcOwnSqlState } from "../helpers/sqlstate.ts";

const FIXTURE = `
create table tag (
  tag_id int generated always as identity primary key,
  code varchar(20) not null unique,
  label text,
  created timestamptz not null default now()
);
create table code_parent (
  id int generated always as identity primary key,
  code text not null unique,
  note text
);
create table code_child (
  id int generated always as identity primary key,
  parent_code text not null references code_parent (code),
  label text
);
create view album_v as select album_id, title, artist_id from album;
create table uq (id int primary key, code text not null unique, val text);
create table uq_child (id serial primary key, uq_id int not null references uq, note text);
create sequence odd_seq;
create table odd_parent (
  k text not null default ('a{b},"c"\\d ' || nextval('odd_seq')),
  k2 text not null default 'NULL',
  note text,
  primary key (k, k2)
);
create table odd_child (
  id int generated always as identity primary key,
  parent_k text not null,
  parent_k2 text not null,
  label text,
  foreign key (parent_k, parent_k2) references odd_parent (k, k2)
);
create type num_pair as (n numeric, t text);
create table num_text (
  id int generated always as identity primary key,
  t text,
  n numeric,
  f float8,
  j json,
  b jsonb,
  a text[],
  p num_pair
);
create table track_tag (
  track_id int not null references track,
  tag_id int not null references tag,
  primary key (track_id, tag_id)
);
`;

let env: Promise<{ schema: Schema; sql: Sql }> | null = null;
function setup() {
  env ??= (async () => {
    const uri = await chinookDb("write", FIXTURE);
    return { schema: await schemaOf(uri), sql: sqlClient(uri) };
  })();
  return env;
}

interface Written {
  res: WriteResult;
  result: unknown[];
}

/** Parses, plans, executes and reads back in one transaction (what the HTTP layer does). */
async function write(
  tree: unknown,
  data: unknown,
  opts: WriteOptions = { sql: true, queryPlan: false },
): Promise<Written> {
  const { schema, sql } = await setup();
  const node = parseQuery(schema, tree, { maxDepth: 6, pointer: "/query" });
  const plan = planWrite(node, data);
  return await sql.begin(async (tx) => {
    const t: Tx = { query: (s, p) => tx.unsafe(s, p as never[]) };
    const res = await executeWrite(t, compileWrite(plan), opts);
    const read = compileRead(node, { rootKeys: res.rootKeys });
    const rows = await tx.unsafe(read.rows.sql, read.rows.params as never[]);
    return { res, result: rows.map((r) => r.j) };
  }) as Written;
}

async function one<T = Record<string, unknown>>(
  text: string,
  params: unknown[] = [],
): Promise<T[]> {
  const { sql } = await setup();
  return [...(await sql.unsafe(text, params as never[]))] as unknown as T[];
}

async function count(table: string): Promise<number> {
  return Number((await one<{ n: number }>(`select count(*)::int as n from ${table}`))[0].n);
}

const TRACK = ["track_id", "name", "milliseconds", "media_type_id", "unit_price"];
const artistTree = (modes: { artist?: string; albums?: string; tracks?: string } = {}) => ({
  relation: "artist",
  ...(modes.artist ? { write_mode: modes.artist } : {}),
  select: ["artist_id", "name", "albums"],
  join: {
    albums: {
      relation: "album",
      on: { artist_id: "artist_id" },
      ...(modes.albums ? { write_mode: modes.albums } : {}),
      select: ["album_id", "title", "tracks"],
      join: {
        tracks: {
          relation: "track",
          on: { album_id: "album_id" },
          ...(modes.tracks ? { write_mode: modes.tracks } : {}),
          select: [...TRACK, "genre_id"],
          order_by: ["track_id"],
        },
      },
      order_by: ["album_id"],
    },
  },
});
const albumTree = (mode: string) => ({
  relation: "album",
  write_mode: "merge",
  select: ["album_id", "title", "tracks"],
  join: {
    tracks: {
      relation: "track",
      on: { album_id: "album_id" },
      write_mode: mode,
      select: TRACK,
      order_by: ["track_id"],
    },
  },
});
const track = (name: string, ms = 1000) => ({
  name,
  milliseconds: ms,
  media_type_id: 1,
  unit_price: 0.99,
});
const stat = (
  path: string[],
  table: string,
  submitted: number,
  inserted: number,
  updated = 0,
  deleted = 0,
) => ({
  path,
  table,
  submitted,
  inserted,
  updated,
  deleted,
});

type Album = { album_id: number; title: string; tracks: { track_id: number; name: string }[] };
type Artist = { artist_id: number; name: string; albums: Album[] };

/** A fresh album with tracks named `names`. */
async function newAlbum(names: string[]): Promise<Album> {
  const { result } = await write({
    relation: "album",
    select: ["album_id", "title", "artist_id", "tracks"],
    join: {
      tracks: {
        relation: "track",
        on: { album_id: "album_id" },
        select: TRACK,
        order_by: ["track_id"],
      },
    },
  }, [{ title: "fresh", artist_id: 1, tracks: names.map((n) => track(n)) }]);
  return result[0] as Album;
}

Deno.test("insert an artist with 2 albums of 3 tracks in one call: keys propagated, exact stats", async () => {
  const before = await count("track");
  const { res, result } = await write(artistTree(), [{
    name: "New Artist",
    albums: [
      { title: "First", tracks: [track("a1"), track("a2"), track("a3")] },
      { title: "Second", tracks: [track("b1"), track("b2"), track("b3")] },
    ],
  }]);
  assert.deepEqual(res.stats, [
    stat([], "public.artist", 1, 1),
    stat(["albums"], "public.album", 2, 2),
    stat(["albums", "tracks"], "public.track", 6, 6),
  ]);
  assert.equal(res.sql.length, 3, "one statement per relation");
  assert.deepEqual(res.sql.map((s) => s.path), [[], ["albums"], ["albums", "tracks"]]);
  const artist = result[0] as Artist;
  assert.equal(artist.name, "New Artist");
  assert.equal(typeof artist.artist_id, "number");
  assert.deepEqual(artist.albums.map((a) => a.title), ["First", "Second"]);
  assert.deepEqual(artist.albums[1].tracks.map((t) => t.name), ["b1", "b2", "b3"]);
  // The generated root keys reach the read-back through the setting the artist's statement stored.
  assert.deepEqual(res.rootKeys, {
    columns: ["artist_id"],
    rows: [],
    settings: ["svc.w_0_0"],
    single: true,
  });
  // One root row: the read-back looks its key up (no unnest, nothing to order).
  const { schema } = await setup();
  const node = parseQuery(schema, artistTree(), { maxDepth: 6, pointer: "/query" });
  const back = compileRead(node, { rootKeys: res.rootKeys }).rows.sql;
  assert.match(back, /WHERE "t0"\."artist_id" = \(current_setting\('svc\.w_0_0'\)::text\[\]/);
  assert.doesNotMatch(back, /unnest/);
  const rows = await one<{ title: string; n: number }>(
    `select al.title, count(*)::int as n from album al join track t using (album_id)
     where al.artist_id = $1 group by al.title order by al.title`,
    [artist.artist_id],
  );
  assert.deepEqual(rows.map((r) => [r.title, r.n]), [["First", 3], ["Second", 3]]);
  assert.equal(await count("track"), before + 6);
});

Deno.test("several root rows: read back in payload order, keys per row", async () => {
  const { res, result } = await write({ relation: "artist", select: ["artist_id", "name"] }, [
    { name: "z-first" },
    { name: "a-second" },
    { name: "m-third" },
  ]);
  assert.deepEqual((result as Artist[]).map((a) => a.name), ["z-first", "a-second", "m-third"]);
  const ids = (result as Artist[]).map((a) => a.artist_id);
  assert.ok(ids[0] < ids[1] && ids[1] < ids[2], "inserted in payload order");
  assert.deepEqual(res.rootKeys.settings, ["svc.w_0_0"]);
  // Root keys known before the write (an update) are bound, not stored.
  const again = await write(
    { relation: "artist", write_mode: "merge", select: ["artist_id", "name"] },
    [{ artist_id: ids[2], name: "m-third!" }, { artist_id: ids[0] }],
  );
  assert.deepEqual(again.res.rootKeys, { columns: ["artist_id"], rows: [[ids[2]], [ids[0]]] });
  assert.deepEqual((again.result as Artist[]).map((a) => a.name), ["m-third!", "z-first"]);
});

Deno.test("merge album → tracks: update one, insert one, delete the omitted one", async () => {
  const album = await newAlbum(["keep-me", "drop-me"]);
  const [t1, t2] = album.tracks;
  const { res, result } = await write(albumTree("merge"), [{
    album_id: album.album_id,
    title: "renamed album",
    tracks: [{ track_id: t1.track_id, name: "updated" }, track("inserted")],
  }]);
  assert.deepEqual(res.stats, [
    stat([], "public.album", 1, 0, 1),
    stat(["tracks"], "public.track", 2, 1, 1, 1),
  ]);
  const a = result[0] as Album;
  assert.equal(a.title, "renamed album");
  assert.deepEqual(a.tracks.map((t) => t.name), ["updated", "inserted"]);
  assert.equal(a.tracks[0].track_id, t1.track_id);
  assert.equal((await one(`select 1 from track where track_id = $1`, [t2.track_id])).length, 0);
  // Statement order: the delete first.
  assert.match(res.sql[0].select, /DELETE FROM "public"\."track"/);
});

Deno.test("merge-new keeps matched rows unchanged, inserts new ones, deletes omitted ones", async () => {
  const album = await newAlbum(["stay", "go"]);
  const [t1, t2] = album.tracks;
  const { res, result } = await write(albumTree("merge-new"), [{
    album_id: album.album_id,
    tracks: [{ track_id: t1.track_id, name: "IGNORED" }, track("brand new")],
  }]);
  assert.deepEqual(res.stats[1], stat(["tracks"], "public.track", 2, 1, 0, 1));
  assert.deepEqual((result[0] as Album).tracks.map((t) => t.name), ["stay", "brand new"]);
  assert.equal((await one(`select 1 from track where track_id = $1`, [t2.track_id])).length, 0);
});

Deno.test("merge: a track moved between two albums of the payload is updated, not deleted", async () => {
  const a = await newAlbum(["moving", "staying"]);
  const b = await newAlbum(["other"]);
  const moving = a.tracks[0];
  const { res, result } = await write({ ...albumTree("merge") }, [
    { album_id: a.album_id, tracks: [{ track_id: a.tracks[1].track_id }] },
    {
      album_id: b.album_id,
      tracks: [{ track_id: b.tracks[0].track_id }, { track_id: moving.track_id }],
    },
  ]);
  assert.deepEqual(res.stats[1], stat(["tracks"], "public.track", 3, 0, 3, 0));
  assert.deepEqual((result as Album[]).map((x) => x.tracks.map((t) => t.name)), [["staying"], [
    "moving",
    "other",
  ]]);
});

Deno.test("merge: a keyed child of a parent outside the payload moves, whatever foreign key it carries", async () => {
  const a = await newAlbum(["moving", "staying"]);
  const b = await newAlbum(["other"]);
  const moving = a.tracks[0];
  const { res } = await write(albumTree("merge"), [{
    album_id: b.album_id,
    tracks: [{ track_id: b.tracks[0].track_id }, { track_id: moving.track_id }],
  }]);
  assert.deepEqual(res.stats[1], stat(["tracks"], "public.track", 2, 0, 2, 0));
  const owner = await one(`select album_id from track where track_id = $1`, [moving.track_id]);
  assert.equal(owner[0].album_id, b.album_id, "moved to the payload's album");
  // The row read earlier, still naming album b, nested under album a: the parent's key wins.
  const tree = albumTree("merge");
  tree.join.tracks.select = [...TRACK, "album_id"];
  await write(tree, [{
    album_id: a.album_id,
    tracks: [
      { track_id: a.tracks[1].track_id },
      { track_id: moving.track_id, album_id: b.album_id },
    ],
  }]);
  const back = await one(`select album_id from track where track_id = $1`, [moving.track_id]);
  assert.equal(back[0].album_id, a.album_id);
});

Deno.test("merge-new on a natural-key link table: insert new links, keep existing, delete omitted", async () => {
  const tree = {
    relation: "playlist",
    write_mode: "merge",
    select: ["playlist_id", "name", "tracks"],
    join: {
      tracks: {
        relation: "playlist_track",
        on: { playlist_id: "playlist_id" },
        write_mode: "merge-new",
        select: ["track_id"],
        order_by: ["track_id"],
      },
    },
  };
  const created = await write({ ...tree, write_mode: "insert" }, [{
    name: "pl",
    tracks: [{ track_id: 1 }, { track_id: 2 }],
  }]);
  const pl = created.result[0] as { playlist_id: number };
  assert.deepEqual(created.res.stats[1], stat(["tracks"], "public.playlist_track", 2, 2));
  const { res, result } = await write(tree, [{
    playlist_id: pl.playlist_id,
    tracks: [{ track_id: 2 }, { track_id: 3 }],
  }]);
  assert.deepEqual(res.stats, [
    stat([], "public.playlist", 1, 0, 0),
    stat(["tracks"], "public.playlist_track", 2, 1, 0, 1),
  ]);
  assert.deepEqual(result, [{
    playlist_id: pl.playlist_id,
    name: "pl",
    tracks: [{ track_id: 2 }, { track_id: 3 }],
  }]);
});

Deno.test("upsert on a natural unique key via on_conflict", async () => {
  const tree = {
    relation: "tag",
    write_mode: "upsert",
    on_conflict: ["code"],
    select: ["tag_id", "code", "label"],
  };
  const first = await write(tree, [{ code: "rock", label: "Rock" }]);
  assert.deepEqual(first.res.stats, [stat([], "public.tag", 1, 1, 0)]);
  const rockId = (first.result[0] as { tag_id: number }).tag_id;
  const { res, result } = await write(tree, [{ code: "jazz", label: "Jazz" }, {
    code: "rock",
    label: "ROCK",
  }]);
  assert.deepEqual(res.stats, [stat([], "public.tag", 2, 1, 1)]);
  const rows = result as { tag_id: number; code: string; label: string }[];
  assert.deepEqual(rows.map((r) => [r.code, r.label]), [["jazz", "Jazz"], ["rock", "ROCK"]]);
  assert.equal(rows[1].tag_id, rockId);
  assert.match(res.sql[0].select, /ON CONFLICT \("code"\) DO UPDATE/);
  // Two rows with one key and different values are rejected before any statement.
  await assert.rejects(
    () => write(tree, [{ code: "x", label: "1" }, { code: "x", label: "2" }]),
    (e) => e instanceof SvcError && e.code === "QUERY_INVALID",
  );
});

Deno.test("an upsert on another unique key never changes the matched row's primary key", async () => {
  await one(`insert into uq values (700, 'K1', 'a')`);
  await one(`insert into uq_child (uq_id, note) values (700, 'kept')`);
  const tree = {
    relation: "uq",
    write_mode: "upsert",
    on_conflict: ["code"],
    select: ["id", "code", "val"],
  };
  const { res, result } = await write(tree, [{ id: 701, code: "K1", val: "b" }]);
  assert.deepEqual(res.stats, [stat([], "public.uq", 1, 0, 1)]);
  // The matched row keeps its key (its children still refer to it); the answer is the row.
  assert.deepEqual(result, [{ id: 700, code: "K1", val: "b" }]);
  assert.deepEqual(await one(`select id, val from uq where code = 'K1'`), [{ id: 700, val: "b" }]);
  assert.deepEqual(await one(`select uq_id from uq_child`), [{ uq_id: 700 }]);
  // A new row takes the key it is given.
  const fresh = await write(tree, [{ id: 702, code: "K2", val: "c" }]);
  assert.deepEqual(fresh.result, [{ id: 702, code: "K2", val: "c" }]);
  // Children of a matched row refer to its key, not the payload's.
  const nested = await write({
    ...tree,
    select: [...tree.select, "children"],
    join: {
      children: {
        relation: "uq_child",
        on: { uq_id: "id" },
        select: ["id", "note"],
        order_by: ["id"],
        write_mode: "insert",
      },
    },
  }, [{ id: 703, code: "K1", val: "d", children: [{ note: "new" }] }]);
  assert.deepEqual(nested.result, [{
    id: 700,
    code: "K1",
    val: "d",
    children: [{ id: 1, note: "kept" }, { id: 2, note: "new" }],
  }]);
});

Deno.test("readonly outgoing join links track → genre by key without writing genre", async () => {
  const genreBefore = await one(`select * from genre where genre_id = 2`);
  const album = await newAlbum([]);
  const tree = {
    relation: "track",
    select: [...TRACK, "album_id", "genre"],
    join: {
      genre: {
        relation: "genre",
        on: { genre_id: "genre_id" },
        write_mode: "readonly",
        select: ["genre_id", "name"],
      },
    },
  };
  const { res, result } = await write(tree, [
    { ...track("linked"), album_id: album.album_id, genre: { genre_id: 2, name: "NOT WRITTEN" } },
    { ...track("unlinked"), album_id: album.album_id, genre: null },
  ]);
  assert.deepEqual(res.stats, [stat([], "public.track", 2, 2)]);
  const rows = result as { name: string; genre: { genre_id: number; name: string } | null }[];
  assert.deepEqual(rows[0].genre, genreBefore[0]);
  assert.equal(rows[1].genre, null);
  assert.deepEqual(await one(`select * from genre where genre_id = 2`), genreBefore);
});

Deno.test("outgoing written join: a new artist is inserted before the album referencing it", async () => {
  const tree = {
    relation: "album",
    select: ["album_id", "title", "artist"],
    join: {
      artist: { relation: "artist", on: { artist_id: "artist_id" }, select: ["artist_id", "name"] },
    },
  };
  const { res, result } = await write(tree, [
    { title: "with new artist", artist: { name: "Brand New Artist" } },
    { title: "with existing artist", artist: { artist_id: 1 } },
  ]);
  assert.deepEqual(res.stats, [
    stat([], "public.album", 2, 2),
    stat(["artist"], "public.artist", 2, 1, 0),
  ]);
  const rows = result as { title: string; artist: { artist_id: number; name: string } }[];
  assert.equal(rows[0].artist.name, "Brand New Artist");
  assert.equal(rows[1].artist.artist_id, 1);
});

Deno.test("a violation at the third level rolls everything back", async () => {
  const counts = async () => [await count("artist"), await count("album"), await count("track")];
  const before = await counts();
  await assert.rejects(
    () =>
      write(artistTree(), [{
        name: "doomed",
        albums: [{
          title: "doomed album",
          tracks: [track("ok"), { ...track("bad fk"), genre_id: 999999 }],
        }],
      }]),
    (e: Error & { code?: string }) => e.code === "23503",
  );
  assert.deepEqual(await counts(), before);
});

Deno.test("an update of a row that does not exist is rejected", async () => {
  await assert.rejects(
    () => write(albumTree("merge"), [{ album_id: 99999999, title: "ghost" }]),
    (e) =>
      e instanceof SvcError && e.code === "QUERY_INVALID" &&
      (e.details as { pointer: string }).pointer === "/data/0",
  );
});

Deno.test("1 vs 1,000 child rows: same number of statements", async () => {
  const run = (n: number) =>
    write(artistTree(), [{
      name: `bulk ${n}`,
      albums: [{
        title: "bulk",
        tracks: Array.from({ length: n }, (_, i) => track(`t${i}`, i + 1)),
      }],
    }]);
  const small = await run(1);
  const big = await run(1000);
  assert.equal(small.res.sql.length, big.res.sql.length);
  assert.equal(big.res.sql.length, 3);
  assert.deepEqual(big.res.stats[2], stat(["albums", "tracks"], "public.track", 1000, 1000));
  const tracks = (big.result[0] as Artist).albums[0].tracks;
  assert.equal(tracks.length, 1000);
  assert.deepEqual(tracks.slice(0, 3).map((t) => t.name), ["t0", "t1", "t2"]);
});

Deno.test("wrong types: SvcError QUERY_INVALID or PostgreSQL 22xxx, never a TypeError", async () => {
  const tree = { relation: "track", select: [...TRACK, "album_id", "composer"] };
  const isSvc = (e: unknown) => e instanceof SvcError && e.code === "QUERY_INVALID";
  const is22 = (e: unknown) => /^22/.test(String((e as { code?: string }).code));
  await assert.rejects(() => write(tree, [{ ...track("x"), milliseconds: "long" }]), isSvc);
  await assert.rejects(() => write(tree, [{ ...track("x"), name: { a: 1 } }]), isSvc);
  await assert.rejects(() => write(tree, [{ ...track("x"), unit_price: [1] }]), isSvc);
  await assert.rejects(() => write(tree, [{ ...track("x"), composer: "c".repeat(500) }]), is22);
  await assert.rejects(() => write(tree, [{ ...track("x"), unit_price: "1e20" }]), is22);
  const tagTree = { relation: "tag", select: ["tag_id", "code", "created"] };
  await assert.rejects(() => write(tagTree, [{ code: "d", created: "not a date" }]), is22);
});

Deno.test("query_plan: ANALYZE plans per statement, and the write persists", async () => {
  const { res, result } = await write(artistTree(), [{
    name: "planned",
    albums: [{ title: "planned album", tracks: [track("p1"), track("p2")] }],
  }], { sql: false, queryPlan: true });
  assert.equal(res.plans.length, 3);
  assert.deepEqual(res.plans.map((p) => p.path), [[], ["albums"], ["albums", "tracks"]]);
  for (const p of res.plans) {
    const plan = p as Record<string, unknown>;
    assert.ok(plan.Plan, "EXPLAIN output object, its path added");
    assert.equal(typeof plan["Execution Time"], "number", "ANALYZE ran");
  }
  assert.deepEqual(res.sql, []);
  const artist = result[0] as Artist;
  assert.equal(artist.albums[0].tracks.length, 2);
  // Committed: visible from another transaction, and exactly once.
  const rows = await one(
    `select count(*)::int as n from track t join album a using (album_id) where a.artist_id = $1`,
    [
      artist.artist_id,
    ],
  );
  assert.deepEqual(rows, [{ n: 2 }]);
  // EXPLAIN ANALYZE runs each statement once, for real: no counts come back (stats and
  // query_plan are exclusive).
  assert.deepEqual(res.stats, []);
  // Merge: delete, update and insert statements are explained too, and run once for real.
  const album = artist.albums[0] as Album;
  const merged = await write(albumTree("merge"), [{
    album_id: album.album_id,
    tracks: [{ track_id: album.tracks[0].track_id, name: "p1!" }, track("p3")],
  }], { sql: true, queryPlan: true });
  const kinds = merged.res.sql.map((s) => s.select.match(/^(DELETE|WITH .* AS \((UPDATE)|INSERT)/));
  // The album given by key only is kept, and looked up (a key no row has is refused).
  assert.deepEqual(kinds.map((m) => m?.[2] ?? m?.[1] ?? "lookup"), [
    "DELETE",
    "lookup",
    "UPDATE",
    "INSERT",
  ]);
  assert.equal(merged.res.plans.length, 4);
  assert.deepEqual((merged.result[0] as Album).tracks.map((t) => t.name), ["p1!", "p3"]);
  const tracks = await one(`select name from track where album_id = $1 order by track_id`, [
    album.album_id,
  ]);
  assert.deepEqual(tracks, [{ name: "p1!" }, { name: "p3" }], "one update, one insert, one delete");
});

Deno.test("generated text keys with array-literal characters flow to children and the read-back", async () => {
  // Keys pass between statements as text[] literals: braces, commas, quotes, backslashes, spaces
  // and the text NULL must come back exactly (and a composite key column by column).
  const tree = {
    relation: "odd_parent",
    select: ["k", "k2", "note", "children"],
    join: {
      children: {
        relation: "odd_child",
        on: { parent_k: "k", parent_k2: "k2" },
        select: ["id", "parent_k", "parent_k2", "label"],
        order_by: ["id"],
      },
    },
  };
  const { res, result } = await write(tree, [
    { note: "first", children: [{ label: "a" }, { label: "b" }] },
    { note: "second", children: [{ label: "c" }] },
  ]);
  assert.deepEqual(res.rootKeys.settings, ["svc.w_0_0", "svc.w_0_1"]);
  const rows = result as {
    k: string;
    k2: string;
    note: string;
    children: { parent_k: string; parent_k2: string; label: string }[];
  }[];
  assert.deepEqual(rows.map((r) => r.note), ["first", "second"]);
  for (const r of rows) {
    assert.match(r.k, /^a\{b\},"c"\\d \d+$/);
    assert.equal(r.k2, "NULL");
    for (const c of r.children) assert.deepEqual([c.parent_k, c.parent_k2], [r.k, r.k2]);
  }
  assert.deepEqual(rows.map((r) => r.children.map((c) => c.label)), [["a", "b"], ["c"]]);
  // Known keys and generated ones mixed: the root keys gathered by one more statement.
  const mixed = await write({ ...tree, write_mode: "merge" }, [
    { note: "third" },
    { k: rows[1].k, k2: rows[1].k2, note: "second!" },
  ]);
  assert.deepEqual(mixed.res.rootKeys.settings, ["svc.write_root_keys_0", "svc.write_root_keys_1"]);
  const again = mixed.result as typeof rows;
  assert.deepEqual(again.map((r) => r.note), ["third", "second!"]);
  assert.match(again[0].k, /^a\{b\},"c"\\d \d+$/);
  assert.deepEqual([again[1].k, again[1].k2], [rows[1].k, "NULL"]);
  assert.deepEqual(again[1].children.map((c) => c.label), ["c"]);
});

Deno.test("rows providing different defaulted columns: absent ones take their default", async () => {
  const tree = { relation: "tag", select: ["tag_id", "code", "created"] };
  const { res, result } = await write(tree, [
    { code: "d1", created: "2001-02-03T04:05:06Z" },
    { code: "d2" },
    { code: "d3", created: "2001-02-03T04:05:06Z" },
  ]);
  // Two column patterns → two statements (a uniform payload needs one), and the root keys in
  // payload order gathered from both.
  assert.equal(res.sql.length, 3);
  assert.match(res.sql[2].select, /^SELECT set_config\('svc\.write_root_keys_0'/);
  assert.deepEqual(res.rootKeys.settings, ["svc.write_root_keys_0"]);
  assert.deepEqual(res.stats, [stat([], "public.tag", 3, 3)]);
  const rows = result as { code: string; created: string }[];
  assert.deepEqual(rows.map((r) => r.code), ["d1", "d2", "d3"]);
  assert.match(rows[0].created, /^2001-02-03/);
  assert.ok(new Date(rows[1].created).getFullYear() >= 2024, "now() default");
  // All columns defaulted or nullable: an empty object inserts a row of defaults.
  const empty = await write({ relation: "artist", select: ["artist_id", "name"] }, [{}, {}]);
  assert.deepEqual((empty.result as Artist[]).map((a) => a.name), [null, null]);
});

Deno.test("values reach their columns as PostgreSQL's jsonb reads them: numbers in exponent notation, json columns, arrays, composites", async () => {
  const tiny = Number("1e-7"), huge = Number("1e21"), neg = Number("-1.5e-10");
  // Scalars only: the input is read as json, numbers sent in plain decimal notation.
  const scalars = await write({ relation: "num_text", select: ["id", "t", "n", "f"] }, [
    { t: tiny, n: tiny, f: tiny },
    { t: huge, n: huge, f: huge },
    { t: neg, n: neg, f: 12.5 },
    { t: true, n: "1e3", f: "-0" },
  ]);
  assert.match(scalars.res.sql[0].select, /json_to_recordset\(\$1::text::json\)/);
  assert.deepEqual(
    await one(
      `select t, n::text as n, f::text as f from num_text where id = any($1::int[]) order by id`,
      [`{${(scalars.result as { id: number }[]).map((r) => r.id).join(",")}}`],
    ),
    [
      { t: "0.0000001", n: "0.0000001", f: "1e-07" },
      { t: "1000000000000000000000", n: "1000000000000000000000", f: "1e+21" },
      { t: "-0.00000000015", n: "-0.00000000015", f: "12.5" },
      { t: "true", n: "1000", f: "-0" },
    ],
  );
  // A json, jsonb, array or composite column: read as jsonb (its rendering of nested values).
  const nested = await write({ relation: "num_text", select: ["id", "t", "j", "b", "a", "p"] }, [
    { t: tiny, j: { b: 1, a: [1, tiny] }, b: { b: huge }, a: [tiny, "x"], p: { n: tiny, t: huge } },
  ]);
  assert.match(nested.res.sql[0].select, /jsonb_to_recordset\(\$1::text::jsonb\)/);
  assert.deepEqual(
    await one(
      `select t, j::text as j, b::text as b, a::text as a, p::text as p from num_text where id = $1`,
      [(nested.result as { id: number }[])[0].id],
    ),
    [{
      t: "0.0000001",
      j: '{"a": [1, 0.0000001], "b": 1}',
      b: '{"b": 1000000000000000000000}',
      a: "{0.0000001,x}",
      p: "(0.0000001,1000000000000000000000)",
    }],
  );
});

Deno.test("update: a column absent from some rows is left unchanged in them", async () => {
  const album = await newAlbum(["one", "two"]);
  const tree = { relation: "track", write_mode: "merge", select: ["track_id", "name", "composer"] };
  await write(tree, album.tracks.map((t) => ({ track_id: t.track_id, composer: "orig" })));
  const { res } = await write(tree, [
    { track_id: album.tracks[0].track_id, name: "one!", composer: "new" },
    { track_id: album.tracks[1].track_id, name: "two!" },
  ]);
  assert.equal(res.sql.length, 1);
  const rows = await one(`select name, composer from track where album_id = $1 order by track_id`, [
    album.album_id,
  ]);
  assert.deepEqual(rows, [{ name: "one!", composer: "new" }, { name: "two!", composer: "orig" }]);
});

Deno.test("outgoing merge: rows referencing one object are written once; differing copies rejected", async () => {
  const artist =
    (await write({ relation: "artist", select: ["artist_id", "name"] }, [{ name: "shared" }]))
      .result[0] as Artist;
  const tree = {
    relation: "album",
    select: ["album_id", "title", "artist"],
    join: {
      artist: { relation: "artist", on: { artist_id: "artist_id" }, select: ["artist_id", "name"] },
    },
  };
  const same = { artist_id: artist.artist_id, name: "shared renamed" };
  const { res } = await write(tree, [{ title: "s1", artist: same }, {
    title: "s2",
    artist: { ...same },
  }]);
  assert.deepEqual(res.stats[1], stat(["artist"], "public.artist", 2, 0, 1));
  await assert.rejects(
    () =>
      write(tree, [{ title: "s3", artist: same }, {
        title: "s4",
        artist: { ...same, name: "other" },
      }]),
    (e) => e instanceof SvcError && e.code === "QUERY_INVALID",
  );
});

Deno.test("kept rows whose children reference a non-key column are looked up", async () => {
  const tree = {
    relation: "code_parent",
    write_mode: "merge-new",
    select: ["id", "note", "children"],
    join: {
      children: {
        relation: "code_child",
        on: { parent_code: "code" },
        select: ["id", "label"],
        order_by: ["id"],
      },
    },
  };
  await one(`insert into code_parent (code, note) values ('P1', 'n')`);
  const [{ id }] = await one<{ id: number }>(`select id from code_parent where code = 'P1'`);
  const { res, result } = await write(tree, [{ id, children: [{ label: "c1" }, { label: "c2" }] }]);
  assert.deepEqual(res.sql.map((s) => s.select.split(" ")[0]), ["DELETE", "WITH", "INSERT"]);
  assert.match(
    res.sql[1].select,
    /^WITH x AS \(.*\) SELECT .* FROM x LEFT JOIN "public"\."code_parent" AS t ON /,
  );
  assert.deepEqual(res.stats, [
    stat([], "public.code_parent", 1, 0, 0),
    stat(["children"], "public.code_child", 2, 2),
  ]);
  assert.deepEqual((result[0] as { children: { label: string }[] }).children.map((c) => c.label), [
    "c1",
    "c2",
  ]);
  await assert.rejects(
    () => write(tree, [{ id: 987654, children: [{ label: "orphan" }] }]),
    (e) => e instanceof SvcError && e.code === "QUERY_INVALID",
  );
});

Deno.test("an updatable view is written by its table's key (or on_conflict naming it)", async () => {
  const tree = {
    relation: "album_v",
    on_conflict: ["album_id"],
    select: ["album_id", "title", "artist_id"],
  };
  const { res, result } = await write(tree, [{ title: "via view", artist_id: 1 }]);
  assert.deepEqual(res.stats, [stat([], "public.album_v", 1, 1)]);
  const row = result[0] as { album_id: number; title: string };
  assert.equal(row.title, "via view");
  const merged = await write({ ...tree, write_mode: "merge" }, [{
    album_id: row.album_id,
    title: "renamed via view",
  }]);
  assert.deepEqual(merged.res.stats, [stat([], "public.album_v", 1, 0, 1)]);
  assert.deepEqual(merged.result, [{
    album_id: row.album_id,
    title: "renamed via view",
    artist_id: 1,
  }]);
  // The view shows its table's key, so it is the view's key without on_conflict.
  const byKey = { relation: "album_v", select: tree.select, write_mode: "merge" };
  const again = await write(byKey, [{
    album_id: row.album_id,
    title: "renamed by its key",
  }]);
  assert.deepEqual(again.res.stats, [stat([], "public.album_v", 1, 0, 1)]);
  // A select without the key cannot be written.
  await assert.rejects(
    () => write({ relation: "album_v", select: ["title", "artist_id"] }, [{ title: "x" }]),
    (e) => e instanceof SvcError && e.code === "QUERY_NOT_WRITABLE",
  );
});

Deno.test("empty data writes nothing", async () => {
  const { res, result } = await write(artistTree(), []);
  assert.deepEqual(result, []);
  assert.deepEqual(res.sql, []);
  assert.deepEqual(res.rootKeys, { columns: ["artist_id"], rows: [] });
});

Deno.test("fuzz: executeWrite raises only SvcError or data-caused database errors (rolled back)", async () => {
  const { schema, sql } = await setup();
  const opt = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined, freq: 3 });
  const id = opt(
    fc.oneof(
      fc.constant(null),
      fc.integer({ min: 1, max: 6 }),
      fc.constant(99999999),
      fc.constant("7"),
    ),
  );
  const text = opt(fc.oneof(fc.string({ maxLength: 8 }), fc.constant(null), fc.integer()));
  const trackRow = fc.record({
    track_id: id,
    name: text,
    milliseconds: opt(
      fc.oneof(fc.integer({ min: -5, max: 5000 }), fc.constant(null), fc.constant("12")),
    ),
    media_type_id: opt(fc.constantFrom(1, 2, 999)),
    unit_price: opt(fc.constantFrom(0.99, "1.5", null)),
    genre_id: opt(fc.constantFrom(1, null, 424242)),
  }, { requiredKeys: [] });
  const albumRow = fc.record({
    album_id: id,
    title: text,
    tracks: opt(fc.array(trackRow, { maxLength: 4 })),
  }, {
    requiredKeys: [],
  });
  const artistRow = fc.record({
    artist_id: id,
    name: text,
    albums: opt(fc.array(albumRow, { maxLength: 3 })),
  }, {
    requiredKeys: [],
  });
  const mode = fc.constantFrom("insert", "upsert", "merge", "merge-new", "readonly");
  const ROLLBACK = new Error("rollback");
  await fc.assert(
    fc.asyncProperty(
      fc.record({ artist: mode, albums: mode, tracks: mode }),
      fc.array(artistRow, { maxLength: 3 }),
      async (modes, data) => {
        const node = parseQuery(schema, artistTree(modes), { maxDepth: 6 });
        try {
          await sql.begin(async (tx) => {
            const plan = planWrite(node, JSON.parse(JSON.stringify(data)));
            const t: Tx = { query: (s, p) => tx.unsafe(s, p as never[]) };
            const res = await executeWrite(t, compileWrite(plan), { sql: true, queryPlan: false });
            const read = compileRead(node, { rootKeys: res.rootKeys });
            await tx.unsafe(read.rows.sql, read.rows.params as never[]);
            throw ROLLBACK;
          });
        } catch (e) {
          if (e === ROLLBACK || e instanceof SvcError) return;
          // A database error is fine when the data caused it (constraint, bad value, types); one
          // only svc's own SQL can cause (42601 syntax, undefined objects, 0A000, XX000) is a bug.
          const code = (e as { code?: unknown }).code;
          if (
            typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) &&
            !svcOwnSqlState(code, (e as Error).message)
          ) return;
          throw e;
        }
      },
    ),
    { numRuns: 200 },
  );
});

Deno.test("stop the database", async () => {
  if (env) await (await env).sql.end();
  await stopDb();
});
