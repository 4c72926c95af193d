/**
 * Nested writes through real HTTP against Chinook: key propagation, modes, stats, sql, plans,
 * rollback, batches, error mapping, all-or-nothing.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { postSvc, startServer } from "../helpers/server.ts";

const uri = await chinookDb(
  "writes",
  `
  create table product (id int generated always as identity primary key, sku text not null unique, name text not null, price numeric(10,2) not null check (price >= 0));
  insert into product (sku, name, price) values ('A-1', 'Anvil', 10), ('B-2', 'Bell', 5);
  grant select, insert, update, delete on all tables in schema public to "~anonymous";
`,
);
const srv = await startServer(uri, ["--dev"]);
const sql = sqlClient(uri);

const post = (body: unknown) => postSvc(srv, body);

const artistTree = {
  relation: "artist",
  select: ["artist_id", "name", "albums"],
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
          select: ["track_id", "name", "media_type_id", "milliseconds", "unit_price"],
          order_by: ["track_id"],
        },
      },
    },
  },
};

const track = (name: string) => ({ name, media_type_id: 1, milliseconds: 1000, unit_price: 0.99 });

Deno.test("insert an artist with 2 albums of 3 tracks: keys propagate, result equals a fresh read, exact stats", async () => {
  const data = [{
    name: "The Testers",
    albums: [
      { title: "First", tracks: [track("a1"), track("a2"), track("a3")] },
      { title: "Second", tracks: [track("b1"), track("b2"), track("b3")] },
    ],
  }];
  const r = await post({ query: artistTree, data, stats: true });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const [artist] = r.body.result;
  assert.ok(artist.artist_id > 275);
  assert.equal(artist.albums.length, 2);
  assert.deepEqual(artist.albums[1].tracks.map((t: { name: string }) => t.name), [
    "b1",
    "b2",
    "b3",
  ]);
  const fresh = await post({ ...artistTree, where: ["=", "artist_id", artist.artist_id] });
  assert.deepEqual(r.body.result, fresh.body);
  const dbAlbums = await sql`select artist_id from album where album_id = ${
    artist.albums[0].album_id
  }`;
  assert.equal(dbAlbums[0].artist_id, artist.artist_id);
  assert.deepEqual(r.body.stats, [
    { path: [], table: "public.artist", submitted: 1, inserted: 1, updated: 0, deleted: 0 },
    { path: ["albums"], table: "public.album", submitted: 2, inserted: 2, updated: 0, deleted: 0 },
    {
      path: ["albums", "tracks"],
      table: "public.track",
      submitted: 6,
      inserted: 6,
      updated: 0,
      deleted: 0,
    },
  ]);
});

Deno.test("merge on album → tracks: update one, insert one, delete the omitted one", async () => {
  const ins = await post({
    query: artistTree,
    data: [{ name: "Mergers", albums: [{ title: "M", tracks: [track("m1"), track("m2")] }] }],
  });
  const album = ins.body[0].albums[0];
  const [t1, t2] = album.tracks;
  const r = await post({
    query: {
      relation: "album",
      write_mode: "merge",
      select: ["album_id", "title", "tracks"],
      join: { tracks: artistTree.join.albums.join.tracks },
    },
    data: [{
      album_id: album.album_id,
      title: "M2",
      tracks: [{ ...track("m1-renamed"), track_id: t1.track_id }, track("m3")],
    }],
    stats: true,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const names = r.body.result[0].tracks.map((t: { name: string }) => t.name);
  assert.deepEqual(names, ["m1-renamed", "m3"]);
  assert.equal(r.body.result[0].title, "M2");
  assert.deepEqual(r.body.stats, [
    { path: [], table: "public.album", submitted: 1, inserted: 0, updated: 1, deleted: 0 },
    { path: ["tracks"], table: "public.track", submitted: 2, inserted: 1, updated: 1, deleted: 1 },
  ]);
  assert.equal(
    (await sql`select count(*)::int as n from track where track_id = ${t2.track_id}`)[0].n,
    0,
  );
});

Deno.test("merge-new keeps matched rows unchanged, inserts new, deletes omitted", async () => {
  const ins = await post({
    query: artistTree,
    data: [{ name: "Keepers", albums: [{ title: "K", tracks: [track("k1"), track("k2")] }] }],
  });
  const album = ins.body[0].albums[0];
  const [k1] = album.tracks;
  const r = await post({
    query: {
      relation: "album",
      write_mode: "merge",
      select: ["album_id", "tracks"],
      join: { tracks: { ...artistTree.join.albums.join.tracks, write_mode: "merge-new" } },
    },
    data: [{
      album_id: album.album_id,
      tracks: [{ ...track("k1-changed?"), track_id: k1.track_id }, track("k3")],
    }],
    stats: true,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.result[0].tracks.map((t: { name: string }) => t.name), ["k1", "k3"]);
  assert.deepEqual(r.body.stats[1], {
    path: ["tracks"],
    table: "public.track",
    submitted: 2,
    inserted: 1,
    updated: 0,
    deleted: 1,
  });
});

Deno.test("upsert on a natural unique key via on_conflict", async () => {
  const r = await post({
    query: {
      relation: "product",
      select: ["id", "sku", "name", "price"],
      write_mode: "upsert",
      on_conflict: ["sku"],
    },
    data: [{ sku: "A-1", name: "Anvil XL", price: 12.5 }, { sku: "C-3", name: "Chain", price: 3 }],
    stats: true,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.result.map((p: { sku: string; name: string }) => [p.sku, p.name]), [[
    "A-1",
    "Anvil XL",
  ], ["C-3", "Chain"]]);
  assert.equal(r.body.result[0].id, 1);
  assert.deepEqual(r.body.stats, [{
    path: [],
    table: "public.product",
    submitted: 2,
    inserted: 1,
    updated: 1,
    deleted: 0,
  }]);
});

Deno.test("readonly link: track → genre by key, genre not written and absent from stats", async () => {
  const r = await post({
    query: {
      relation: "track",
      select: ["track_id", "name", "media_type_id", "milliseconds", "unit_price", "genre"],
      join: { genre: { relation: "genre", on: { genre_id: "genre_id" }, write_mode: "readonly" } },
    },
    data: [{ ...track("linked"), genre: { genre_id: 2, name: "ignored" } }],
    stats: true,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.result[0].genre, { genre_id: 2, name: "Jazz" });
  assert.deepEqual(r.body.stats, [{
    path: [],
    table: "public.track",
    submitted: 1,
    inserted: 1,
    updated: 0,
    deleted: 0,
  }]);
});

Deno.test("rollback returns the would-be result and leaves the database unchanged", async () => {
  const before = (await sql`select count(*)::int as n from artist`)[0].n;
  const r = await post({
    query: artistTree,
    data: [{ name: "Ghost", albums: [{ title: "G", tracks: [track("g")] }] }],
    rollback: true,
  });
  assert.equal(r.status, 200);
  assert.equal(r.body[0].name, "Ghost");
  assert.equal(r.body[0].albums[0].tracks[0].name, "g");
  assert.equal((await sql`select count(*)::int as n from artist`)[0].n, before);
});

Deno.test("merge-new at the root answers kept and inserted rows alike; a kept key no row has is 400", async () => {
  // Found by a black-box audit: a plain insert answered from its RETURNING left the kept row out.
  const tree = { relation: "genre", select: ["genre_id", "name"], write_mode: "merge-new" };
  const r = await post({
    query: tree,
    data: [{ genre_id: 1, name: "ignored" }, { name: "Kept+new" }],
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.length, 2, JSON.stringify(r.body));
  assert.deepEqual(r.body[0], { genre_id: 1, name: "Rock" });
  assert.equal(r.body[1].name, "Kept+new");
  // A keyed row is kept, never inserted: a key no row has is refused, nothing written (merge too).
  for (const mode of ["merge-new", "merge"]) {
    const before = (await sql`select count(*)::int as n from genre`)[0].n;
    const bad = await post({
      query: { ...tree, write_mode: mode },
      data: [{ name: `new ${mode}` }, { genre_id: 99999 }],
    });
    assert.equal(bad.status, 400, `${mode}: ${JSON.stringify(bad.body)}`);
    assert.equal(bad.body.code, "QUERY_INVALID");
    assert.equal(bad.body.details.pointer, "/data/1");
    assert.equal((await sql`select count(*)::int as n from genre`)[0].n, before);
  }
});

Deno.test("query_plan on a write returns ANALYZE plans and the write persists", async () => {
  const r = await post({
    query: { relation: "genre", select: ["genre_id", "name"] },
    data: [{ name: "Planned" }],
    query_plan: true,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.ok(r.body.query_plan.length >= 1);
  // Each entry is the statement's EXPLAIN object, as a read's, with its path added (no wrapper).
  assert.deepEqual(r.body.query_plan[0].path, []);
  assert.ok(!("plan" in r.body.query_plan[0]), Object.keys(r.body.query_plan[0]).join(","));
  assert.ok(
    "Actual Total Time" in r.body.query_plan[0].Plan ||
      "Actual Rows" in r.body.query_plan[0].Plan,
  );
  assert.equal((await sql`select count(*)::int as n from genre where name = 'Planned'`)[0].n, 1);
});

Deno.test("query_plan on a write has a plan per statement the sql flag lists, the read-back's too", async () => {
  const write = (name: string) => ({
    query: artistTree,
    data: [{ name, albums: [{ title: "x", tracks: [track("t")] }] }],
    query_plan: true,
    sql: true,
    rollback: true,
  });
  const single = await post(write("P1"));
  // A write in a batch runs on another path (the batch's transaction).
  const batch = await post([{ relation: "genre", limit: 1 }, write("P2")]);
  assert.equal(single.status, 200, JSON.stringify(single.body));
  assert.equal(batch.status, 200, JSON.stringify(batch.body));
  for (const body of [single.body, batch.body[1]]) {
    const paths = (xs: { path: string[] }[]) => xs.map((x) => x.path);
    assert.deepEqual(paths(body.query_plan), paths(body.sql));
    assert.deepEqual(paths(body.query_plan), [[], ["albums"], ["albums", "tracks"], []]);
    const readBack = body.query_plan[3];
    assert.ok("Actual Rows" in readBack.Plan, JSON.stringify(readBack).slice(0, 300));
    // The answer is still the rows read back.
    assert.equal(body.result[0].albums[0].tracks[0].name, "t");
  }
});

Deno.test("the sql flag shows the same statements for 1 and 1,000 child rows, plus the read-back", async () => {
  const one = await post({
    query: artistTree,
    data: [{ name: "S1", albums: [{ title: "x", tracks: [track("t")] }] }],
    sql: true,
    rollback: true,
  });
  const many = await post({
    query: artistTree,
    data: [{
      name: "S1000",
      albums: [{ title: "x", tracks: Array.from({ length: 1000 }, (_, i) => track(`t${i}`)) }],
    }],
    sql: true,
    rollback: true,
  });
  assert.equal(one.status, 200);
  assert.equal(many.status, 200);
  assert.equal(many.body.result[0].albums[0].tracks.length, 1000);
  assert.equal(one.body.sql.length, many.body.sql.length);
  assert.equal(one.body.sql.length, 4); // artist, album, track inserts + read-back
  assert.deepEqual(one.body.sql.map((s: { path: string[] }) => s.path), [[], ["albums"], [
    "albums",
    "tracks",
  ], []]);
});

Deno.test("nothing is half-written: a violation at the third level rolls back every level", async () => {
  const counts = async () =>
    (await sql`select (select count(*) from artist)::int as a, (select count(*) from album)::int as b, (select count(*) from track)::int as c`)[
      0
    ];
  const before = await counts();
  const r = await post({
    query: artistTree,
    data: [{
      name: "Broken",
      albums: [{ title: "ok", tracks: [track("fine"), { ...track("bad"), media_type_id: 999 }] }],
    }],
  });
  assert.equal(r.status, 409);
  assert.equal(r.code, "PG_23503");
  assert.deepEqual(await counts(), before);
});

Deno.test('database errors map to the statuses of docs/query.md "Errors"', async () => {
  const dup = await post({
    query: { relation: "product", select: ["id", "sku", "name", "price"] },
    data: [{ sku: "B-2", name: "again", price: 1 }],
  });
  assert.equal(dup.status, 409);
  assert.equal(dup.code, "PG_23505");
  const check = await post({
    query: { relation: "product", select: ["id", "sku", "name", "price"] },
    data: [{ sku: "Z", name: "neg", price: -1 }],
  });
  assert.equal(check.status, 400);
  assert.equal(check.code, "PG_23514");
  const missing = await post({
    query: { relation: "product", select: ["id", "sku", "name", "price"] },
    data: [{ sku: "Y" }],
  });
  assert.equal(missing.status, 400);
  assert.equal(missing.code, "QUERY_MANDATORY_COLUMN_MISSING");
  assert.match(missing.body.message, /name|price/);
  const wrongType = await post({
    query: { relation: "product", select: ["id", "sku", "name", "price"] },
    data: [{ sku: "W", name: "w", price: "cheap" }],
  });
  assert.equal(wrongType.status, 400);
  assert.match(JSON.stringify(wrongType.body), /price/);
  const notWritable = await post({
    query: { relation: "product", select: ["sku", "name"] },
    data: [{ sku: "Q", name: "q" }],
  });
  assert.equal(notWritable.status, 400);
  assert.equal(notWritable.code, "QUERY_NOT_WRITABLE");
  const shape = await post({
    query: artistTree,
    data: [{ name: "x", albums: { title: "not an array" } }],
  });
  assert.equal(shape.status, 400);
  assert.equal(shape.code, "QUERY_INVALID");
  assert.equal(shape.body.details.pointer, "/data/0/albums");
});

Deno.test("batches mix reads and writes in one transaction; first error rolls back all", async () => {
  const ok = await post([
    { query: { relation: "genre", select: ["genre_id", "name"] }, data: [{ name: "Batch1" }] },
    { relation: "genre", where: ["=", "name", ["Batch1"]], select: ["name"] },
  ]);
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  assert.deepEqual(ok.body[1], [{ name: "Batch1" }]);
  const bad = await post([
    { query: { relation: "genre", select: ["genre_id", "name"] }, data: [{ name: "Batch2" }] },
    {
      query: { relation: "product", select: ["id", "sku", "name", "price"] },
      data: [{ sku: "A-1", name: "dup", price: 1 }],
    },
  ]);
  assert.equal(bad.status, 409);
  assert.equal(bad.body.details.index, 1);
  assert.equal((await sql`select count(*)::int as n from genre where name = 'Batch2'`)[0].n, 0);
  const rb = await post([
    {
      query: { relation: "genre", select: ["genre_id", "name"] },
      data: [{ name: "Batch3" }],
      rollback: true,
    },
    { query: { relation: "genre", select: ["genre_id", "name"] }, data: [{ name: "Batch4" }] },
  ]);
  assert.equal(rb.status, 200);
  const names = await sql`select name from genre where name in ('Batch3', 'Batch4')`;
  assert.deepEqual(names.map((n) => n.name), ["Batch4"]);
});

Deno.test("a repeated nested insert of one shape: each write's own values, a bad one refused at its pointer", async () => {
  // The second and later writes of a payload shape come from its plan template
  // (src/write/template.ts): they must write their own values and check them as the first did.
  const write = (name: string, ms: unknown[]) =>
    post({
      query: artistTree,
      data: [{
        name,
        albums: [{
          title: `${name} LP`,
          tracks: ms.map((m, i) => ({ ...track(`${name} ${i}`), milliseconds: m })),
        }],
      }],
    });
  const first = await write("Shape One", [1000, 2000]);
  assert.equal(first.status, 200, JSON.stringify(first.body));
  const odd = 'Shape "Two" \\ é 🎵 \u2028';
  const second = await write(odd, [3e6, 4]);
  assert.equal(second.status, 200, JSON.stringify(second.body));
  assert.equal(second.body[0].name, odd);
  assert.deepEqual(
    second.body[0].albums[0].tracks.map((
      t: { name: string; milliseconds: number },
    ) => [t.name, t.milliseconds]),
    [[`${odd} 0`, 3000000], [`${odd} 1`, 4]],
  );
  assert.notEqual(second.body[0].artist_id, first.body[0].artist_id);
  const bad = await write("Shape Three", [5, "five"]);
  assert.equal(bad.status, 400, JSON.stringify(bad.body));
  assert.equal(bad.code, "QUERY_INVALID");
  assert.equal(bad.body.details.pointer, "/data/0/albums/0/tracks/1/milliseconds");
  const bad2 = await write("Shape Three", [5.5, 6]);
  assert.equal(bad2.body.details.pointer, "/data/0/albums/0/tracks/0/milliseconds");
  assert.equal(
    (await sql`select count(*)::int as n from artist where name = 'Shape Three'`)[0].n,
    0,
  );
  const third = await write("Shape Three", [5, 6]);
  assert.equal(third.status, 200, JSON.stringify(third.body));
  const rows = await sql`select t.name, t.milliseconds from track t join album a using (album_id)
    join artist r using (artist_id) where r.name = 'Shape Three' order by t.track_id`;
  assert.deepEqual(rows.map((r) => [r.name, r.milliseconds]), [["Shape Three 0", 5], [
    "Shape Three 1",
    6,
  ]]);
});

Deno.test("a write answers the requested keys whatever they are: records and their fallback", async () => {
  const long = "k".repeat(64); // no column name holds it: its row is built as an object
  // Plain columns only: the answer is built over the INSERT's returned rows.
  const flat = await post({
    query: {
      relation: "product",
      select: { "SKU code": "sku", 'the "name"': "name", [long]: "price", "#": "id" },
    },
    data: [{ "SKU code": "K-1", 'the "name"': "Key", [long]: 3 }],
    rollback: true,
  });
  assert.equal(flat.status, 200, JSON.stringify(flat.body));
  const [row] = flat.body;
  assert.deepEqual(Object.keys(row), ["SKU code", 'the "name"', long, "#"]);
  assert.deepEqual({ ...row, "#": 0 }, {
    "SKU code": "K-1",
    'the "name"': "Key",
    [long]: 3,
    "#": 0,
  });
  // A join: the answer is read back by the written keys.
  const nested = await post({
    query: {
      relation: "album",
      select: { "Album Title": "title", "by": "artist_id", "Tracks": "tracks", "a#": "album_id" },
      join: {
        tracks: {
          relation: "track",
          on: { album_id: "album_id" },
          select: {
            "Track Name": "name",
            "€uro": "unit_price",
            "media": "media_type_id",
            "ms": "milliseconds",
            "t#": "track_id",
          },
          order_by: ["track_id"],
        },
      },
    },
    data: [{
      "Album Title": "Keys",
      "by": 1,
      "Tracks": ["k1", "k2"].map((n) => ({ "Track Name": n, "€uro": 0.99, "media": 1, "ms": 9 })),
    }],
    rollback: true,
  });
  assert.equal(nested.status, 200, JSON.stringify(nested.body));
  const [album] = nested.body;
  assert.deepEqual(Object.keys(album), ["Album Title", "by", "Tracks", "a#"]);
  assert.deepEqual({ ...album, "a#": 0, "Tracks": [] }, {
    "Album Title": "Keys",
    "by": 1,
    "Tracks": [],
    "a#": 0,
  });
  assert.deepEqual(
    album.Tracks.map((t: Record<string, unknown>) => ({ ...t, "t#": 0 })),
    ["k1", "k2"].map((n) => ({ "Track Name": n, "€uro": 0.99, "media": 1, "ms": 9, "t#": 0 })),
  );
});

Deno.test("teardown", async () => {
  await sql.end();
  await srv.stop();
  await stopDb();
});
