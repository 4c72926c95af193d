/**
 * The write engine on Chinook, for every write mode (insert, upsert, merge, merge-new, readonly
 * links), nested 2–3 levels: one plain statement per relation and level (and per set of provided
 * columns), all pipelined, generated keys passed between them inside the database; each run is
 * rolled back. Checks raised inside the statements map back to the same QUERY_INVALID and pointer.
 * Over HTTP, a loopback proxy shows a single write as one round trip: begin, role, every statement
 * of the write, its read-back and commit. (These cases compared the former one-statement CTE path
 * with the statement-per-level path; both are now this one engine.)
 */
import assert from "node:assert/strict";
import { type Sql, sqlClient } from "../helpers/sql.ts";
import { parseQuery } from "../../src/compile/parse.ts";
import { compileRead } from "../../src/compile/sql.ts";
import type { Schema } from "../../src/db/schema.ts";
import type { Row, Tx } from "../../src/db/tx.ts";
import { SvcError } from "../../src/svc_error.ts";
import { compileWrite } from "../../src/write/compile.ts";
import { executeWrite, type WriteResult } from "../../src/write/execute.ts";
import { planWrite } from "../../src/write/plan.ts";
import { chinookDb, schemaOf, stopDb } from "../helpers/db.ts";
import { pgProxy } from "../helpers/wireproxy.ts";
import { waitFor } from "../helpers/wait.ts";
import { startServer } from "../helpers/server.ts";

const FIXTURE = `
create table tag (
  tag_id int generated always as identity primary key,
  code varchar(20) not null unique,
  label text
);
create table tag_note (
  note_id int generated always as identity primary key,
  tag_id int not null references tag,
  body text not null
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
create function tag_note_upper() returns trigger language plpgsql as $$
begin new.body := upper(new.body); return new; end $$;
create trigger tag_note_upper before insert on tag_note for each row execute function tag_note_upper();
alter table tag_note enable row level security;
create policy tag_note_all on tag_note for all using (true) with check (body <> 'FORBIDDEN');
create function code_parent_skip() returns trigger language plpgsql as $$
begin if new.note = 'SKIP' then return null; end if; return new; end $$;
create trigger code_parent_skip before insert on code_parent for each row execute function code_parent_skip();
insert into code_parent (code, note) values ('P1', 'first');
insert into code_child (parent_code, label) values ('P1', 'old child');
grant select, insert, update, delete on all tables in schema public to "~anonymous";
`;
const TABLES = [
  "artist",
  "album",
  "track",
  "invoice",
  "invoice_line",
  "playlist",
  "playlist_track",
  "genre",
  "tag",
  "tag_note",
  "code_parent",
  "code_child",
];

let env: Promise<{ uri: string; schema: Schema; sql: Sql }> | null = null;
function setup() {
  env ??= (async () => {
    const uri = await chinookDb("cte", FIXTURE);
    return { uri, schema: await schemaOf(uri), sql: sqlClient(uri) };
  })();
  return env;
}

class Rollback {
  constructor(readonly run: Run) {}
}

interface Run {
  stats?: WriteResult["stats"];
  result?: unknown[];
  tables?: string;
  /** Statements sent (the write's, then the read-back). */
  statements: number;
  /** Statements the write compiled to. */
  compiled: number;
  error?: { code: string; pointer?: unknown };
}

/** Runs a write inside a transaction that is rolled back; the read-back pipelined behind it. */
async function run(tree: unknown, data: unknown): Promise<Run> {
  const { schema, sql } = await setup();
  try {
    await sql.begin(async (tx) => {
      let statements = 0;
      let compiled = 0;
      const t: Tx = {
        query: (s, p) => {
          statements++;
          return tx.unsafe(s, p as never[]) as unknown as Promise<Row[]>;
        },
      };
      const node = parseQuery(schema, tree, { maxDepth: 6, pointer: "/query" });
      let out: Run;
      try {
        const w = compileWrite(planWrite(node, data));
        compiled = w.statements.length;
        const read = compileRead(node, { rootKeys: w.rootKeys });
        const res = await executeWrite(t, w, { sql: true, queryPlan: false }, [read.rows]);
        const tables: string[] = [];
        for (const name of TABLES) {
          const [r] = await tx.unsafe(
            `select coalesce(json_agg(to_jsonb(t) order by t::text), '[]')::text as j from ${name} t`,
          );
          tables.push(`${name}: ${r.j}`);
        }
        assert.equal(res.sql.length, compiled);
        out = {
          stats: res.stats,
          result: res.after[0].map((r) => r.j),
          tables: tables.join("\n"),
          statements,
          compiled,
        };
      } catch (e) {
        if (e instanceof assert.AssertionError) throw e;
        const code = e instanceof SvcError ? e.code : String((e as { code?: string }).code);
        const pointer = e instanceof SvcError
          ? (e.details as { pointer?: unknown } | undefined)?.pointer
          : undefined;
        out = { statements, compiled, error: { code, pointer } };
      }
      throw new Rollback(out);
    });
  } catch (e) {
    if (e instanceof Rollback) return e.run;
    throw e;
  }
  throw new Error("not rolled back");
}

/** Runs a write; expects `statements` statements (the write's), all sent before any answer. */
async function same(tree: unknown, data: unknown, statements?: number): Promise<Run> {
  const one = await run(tree, data);
  if (!one.error) {
    assert.equal(one.statements, one.compiled + 1, "the write's statements and the read-back");
    if (statements !== undefined) assert.equal(one.compiled, statements, "statements");
  }
  return one;
}

async function exec(text: string, params: unknown[] = []): Promise<Row[]> {
  const { sql } = await setup();
  return [...(await sql.unsafe(text, params as never[]))] as Row[];
}

const TRACK = ["track_id", "name", "milliseconds", "media_type_id", "unit_price"];
const track = (name: string, ms = 1000) => ({
  name,
  milliseconds: ms,
  media_type_id: 1,
  unit_price: 0.99,
});
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
      order_by: ["album_id"],
      join: {
        tracks: {
          relation: "track",
          on: { album_id: "album_id" },
          ...(modes.tracks ? { write_mode: modes.tracks } : {}),
          select: [...TRACK, "genre_id"],
          order_by: ["track_id"],
        },
      },
    },
  },
});
const albumTree = (album: string, tracks: string) => ({
  relation: "album",
  write_mode: album,
  select: ["album_id", "title", "artist_id", "tracks"],
  join: {
    tracks: {
      relation: "track",
      on: { album_id: "album_id" },
      write_mode: tracks,
      select: TRACK,
      order_by: ["track_id"],
    },
  },
});
const invoiceTree = {
  relation: "invoice",
  select: [
    "invoice_id",
    "customer_id",
    "invoice_date",
    "billing_address",
    "billing_city",
    "billing_country",
    "billing_postal_code",
    "total",
    "lines",
  ],
  join: {
    lines: {
      relation: "invoice_line",
      on: { invoice_id: "invoice_id" },
      select: ["invoice_line_id", "invoice_id", "track_id", "unit_price", "quantity"],
      order_by: ["invoice_line_id"],
    },
  },
};
const invoice = (n: number) => ({
  customer_id: 7,
  invoice_date: "2026-11-21T10:00:00",
  billing_address: "Klanova 9/506",
  billing_city: "Prague",
  billing_country: "Czech Republic",
  billing_postal_code: "14700",
  total: 9.94,
  lines: Array.from({ length: n }, (_, i) => ({
    track_id: i + 1,
    unit_price: 0.99,
    quantity: i + 1,
  })),
});

/** A committed album (artist 1) with tracks named `names`. */
async function newAlbum(names: string[]): Promise<{ album_id: number; track_ids: number[] }> {
  const [a] = await exec(
    `insert into album (title, artist_id) values ('fresh', 1) returning album_id`,
  );
  const ids: number[] = [];
  for (const n of names) {
    const [t] = await exec(
      `insert into track (name, album_id, media_type_id, milliseconds, unit_price) ` +
        `values ($1, $2, 1, 1000, 0.99) returning track_id`,
      [n, a.album_id],
    );
    ids.push(Number(t.track_id));
  }
  return { album_id: Number(a.album_id), track_ids: ids };
}

Deno.test("insert: invoice + 5 lines, and two invoices (payload order)", async () => {
  const one = await same(invoiceTree, [invoice(5)], 2);
  assert.deepEqual(one.stats?.map((s) => s.inserted), [1, 5]);
  const two = await same(invoiceTree, [invoice(2), invoice(3)], 2);
  const res = two.result as { invoice_id: number; lines: { invoice_id: number }[] }[];
  assert.equal(res[0].lines.length, 2);
  assert.equal(res[1].lines.length, 3);
  for (const inv of res) for (const l of inv.lines) assert.equal(l.invoice_id, inv.invoice_id);
  assert.ok(res[0].invoice_id < res[1].invoice_id, "payload order");
});

Deno.test("insert order: 300 invoices with 0-4 lines each map every generated key to its row", async () => {
  const data = Array.from({ length: 300 }, (_, i) => ({
    ...invoice(i % 5),
    billing_city: `city ${i}`,
    total: i,
  }));
  const run = await same(invoiceTree, data, 2);
  const res = run.result as {
    invoice_id: number;
    billing_city: string;
    lines: { invoice_id: number; quantity: number }[];
  }[];
  res.forEach((inv, i) => {
    assert.equal(inv.billing_city, `city ${i}`, "payload order");
    assert.deepEqual(
      inv.lines.map((l) => l.quantity),
      Array.from({ length: i % 5 }, (_, k) => k + 1),
    );
    for (const l of inv.lines) assert.equal(l.invoice_id, inv.invoice_id);
  });
});

Deno.test("insert: artist → 2 albums → 3 tracks each (3 levels), two artists", async () => {
  const run = await same(artistTree(), [
    {
      name: "A",
      albums: [
        { title: "A1", tracks: [track("a11"), track("a12"), track("a13")] },
        { title: "A2", tracks: [track("a21"), { ...track("a22"), genre_id: 3 }, track("a23")] },
      ],
    },
    { name: "B", albums: [{ title: "B1", tracks: [] }, { title: "B2" }] },
  ]);
  assert.deepEqual(run.stats?.map((s) => [s.submitted, s.inserted]), [[2, 2], [4, 4], [6, 6]]);
});

Deno.test("upsert: natural unique key (insert and update) with nested inserts keyed by RETURNING", async () => {
  await exec(`insert into tag (code, label) values ('rock', 'Rock') on conflict do nothing`);
  const tree = {
    relation: "tag",
    write_mode: "upsert",
    on_conflict: ["code"],
    select: ["tag_id", "code", "label", "notes"],
    join: {
      notes: {
        relation: "tag_note",
        on: { tag_id: "tag_id" },
        select: ["note_id", "body"],
        order_by: ["note_id"],
      },
    },
  };
  const run = await same(tree, [
    { code: "jazz", label: "Jazz", notes: [{ body: "j1" }, { body: "j2" }] },
    { code: "rock", label: "ROCK", notes: [{ body: "r1" }] },
    { code: "rock", label: "ROCK" },
  ]);
  assert.deepEqual(run.stats?.[0], {
    path: [],
    table: "public.tag",
    submitted: 3,
    inserted: 1,
    updated: 1,
    deleted: 0,
  });
  // Two rows with one key and different values: the same QUERY_INVALID on both paths.
  const bad = await same(tree, [{ code: "x", label: "1" }, { code: "x", label: "2" }]);
  assert.equal(bad.error?.code, "QUERY_INVALID");
});

Deno.test("upsert mode on identity keys: update the existing artist, insert new albums and tracks", async () => {
  const run = await same(artistTree({ artist: "upsert", albums: "upsert" }), [
    { artist_id: 1, name: "AC/DC renamed", albums: [{ title: "new", tracks: [track("n1")] }] },
    { name: "brand new", albums: [{ title: "bn", tracks: [track("b1"), track("b2")] }] },
  ]);
  assert.deepEqual(run.stats?.map((s) => [s.inserted, s.updated]), [[1, 1], [2, 0], [3, 0]]);
});

Deno.test("merge: update one track, insert one, delete the omitted one; merge deletes counted", async () => {
  const a = await newAlbum(["keep-me", "drop-me", "drop-me-too"]);
  const run = await same(albumTree("merge", "merge"), [{
    album_id: a.album_id,
    title: "renamed",
    tracks: [{ track_id: a.track_ids[0], name: "updated" }, track("inserted")],
  }]);
  assert.deepEqual(run.stats?.map((s) => [s.inserted, s.updated, s.deleted]), [[0, 1, 0], [
    1,
    1,
    2,
  ]]);
  // A track moved between two albums of the payload is updated, not deleted.
  const b = await newAlbum(["other"]);
  const moved = await same(albumTree("merge", "merge"), [
    { album_id: a.album_id, tracks: [{ track_id: a.track_ids[1] }] },
    { album_id: b.album_id, tracks: [{ track_id: b.track_ids[0] }, { track_id: a.track_ids[0] }] },
  ]);
  assert.deepEqual(moved.stats?.[1].deleted, 1);
  // An update of a row that does not exist: the same QUERY_INVALID and pointer.
  const ghost = await same(albumTree("merge", "merge"), [{ album_id: 99999999, title: "ghost" }]);
  assert.deepEqual(ghost.error, { code: "QUERY_INVALID", pointer: "/data/0" });
});

Deno.test("merge-new: kept rows unchanged, new ones inserted, omitted ones deleted", async () => {
  const a = await newAlbum(["stay", "go"]);
  const run = await same(albumTree("merge", "merge-new"), [{
    album_id: a.album_id,
    tracks: [{ track_id: a.track_ids[0], name: "IGNORED" }, track("brand new")],
  }]);
  assert.deepEqual(run.stats?.[1], {
    path: ["tracks"],
    table: "public.track",
    submitted: 2,
    inserted: 1,
    updated: 0,
    deleted: 1,
  });
  // Natural-key link table: insert-or-keep and deletes.
  const [pl] = await exec(`insert into playlist (name) values ('pl') returning playlist_id`);
  await exec(`insert into playlist_track values ($1, 1), ($1, 2)`, [pl.playlist_id]);
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
  const links = await same(tree, [{
    playlist_id: pl.playlist_id,
    tracks: [{ track_id: 2 }, { track_id: 3 }],
  }]);
  assert.deepEqual(links.stats?.[1].inserted, 1);
  assert.deepEqual(links.stats?.[1].deleted, 1);
  // A new playlist with links: children keyed by the parent's generated key.
  const fresh = await same({ ...tree, write_mode: "insert" }, [{
    name: "p2",
    tracks: [{ track_id: 4 }],
  }], 2);
  const p2 = fresh.result?.[0] as { playlist_id: number; name: string; tracks: unknown[] };
  assert.deepEqual(p2.tracks, [{ track_id: 4 }]);
  assert.match(fresh.tables!, new RegExp(`"track_id": 4, "playlist_id": ${p2.playlist_id}\\b`));
});

Deno.test("merge: kept parents identified by a non-key column are looked up", async () => {
  const [p] = await exec(`select id from code_parent where code = 'P1'`);
  const tree = {
    relation: "code_parent",
    write_mode: "merge",
    select: ["id", "children"],
    join: {
      children: {
        relation: "code_child",
        on: { parent_code: "code" },
        write_mode: "merge",
        select: ["id", "label"],
        order_by: ["id"],
      },
    },
  };
  const run = await same(tree, [{ id: p.id, children: [{ label: "new child" }] }]);
  assert.deepEqual(run.stats?.[1].deleted, 1);
  const ghost = await same(tree, [{ id: 424242, children: [{ label: "x" }] }]);
  assert.deepEqual(ghost.error, { code: "QUERY_INVALID", pointer: "/data/0" });
});

Deno.test("readonly links: tracks link a genre by key; an outgoing written join inserts first", async () => {
  const tree = {
    relation: "album",
    select: ["album_id", "title", "artist", "tracks"],
    join: {
      artist: { relation: "artist", on: { artist_id: "artist_id" }, select: ["artist_id", "name"] },
      tracks: {
        relation: "track",
        on: { album_id: "album_id" },
        select: [...TRACK, "genre"],
        order_by: ["track_id"],
        join: {
          genre: {
            relation: "genre",
            on: { genre_id: "genre_id" },
            write_mode: "readonly",
            select: ["genre_id", "name"],
          },
        },
      },
    },
  };
  const run = await same(tree, [
    {
      title: "linked",
      artist: { name: "new artist" },
      tracks: [
        { ...track("g2"), genre: { genre_id: 2, name: "NOT WRITTEN" } },
        { ...track("none"), genre: null },
      ],
    },
    { title: "old artist", artist: { artist_id: 1, name: "AC/DC" }, tracks: [] },
  ]);
  assert.deepEqual(run.stats?.map((s) => s.table), [
    "public.album",
    "public.artist",
    "public.track",
  ]);
  const genre = (run.result as { tracks: { genre: { name: string } | null }[] }[])[0].tracks;
  assert.notEqual(genre[0].genre?.name, "NOT WRITTEN");
});

Deno.test("a trigger that skips a parent row its children need: an error, nothing written", async () => {
  const tree = {
    relation: "code_parent",
    select: ["id", "code", "note", "children"],
    join: {
      children: {
        relation: "code_child",
        on: { parent_code: "code" },
        select: ["id", "label"],
      },
    },
  };
  const ok = await same(tree, [{ code: "K1", note: "kept", children: [{ label: "c" }] }], 2);
  assert.deepEqual(ok.stats?.map((s) => s.inserted), [1, 1]);
  // The second parent is skipped by its BEFORE trigger: the rows returned no longer line up with
  // the rows sent, and the statement says so instead of giving the children a wrong parent.
  const skipped = await same(tree, [
    { code: "K2", note: "kept", children: [{ label: "c2" }] },
    { code: "K3", note: "SKIP", children: [{ label: "c3" }] },
  ]);
  assert.equal(skipped.error?.code, "INTERNAL");
  assert.equal(
    Number(
      (await exec(`select count(*)::int as n from code_parent where code in ('K2', 'K3')`))[0].n,
    ),
    0,
  );
});

Deno.test("constraint errors keep their SQLSTATE; nothing is written", async () => {
  const before = await exec(`select count(*)::int as n from track`);
  const run = await same(artistTree(), [{
    name: "Broken",
    albums: [{ title: "ok", tracks: [track("fine"), { ...track("bad"), media_type_id: 999 }] }],
  }]);
  assert.deepEqual(run.error, { code: "23503", pointer: undefined });
  assert.deepEqual(await exec(`select count(*)::int as n from track`), before);
});

Deno.test("a relation written at two nodes, a self-reference, and an empty write", async () => {
  // One relation at two nodes (employee → reports): the reports' statement sees the boss row.
  const selfTree = {
    relation: "employee",
    select: ["employee_id", "last_name", "first_name", "reports"],
    join: {
      reports: {
        relation: "employee",
        on: { reports_to: "employee_id" },
        select: ["employee_id", "last_name", "first_name", "reports_to"],
      },
    },
  };
  const selfData = [{
    last_name: "Boss",
    first_name: "B",
    reports: [{ last_name: "E", first_name: "e" }, { last_name: "F", first_name: "f" }],
  }];
  const boss = await same(selfTree, selfData, 2);
  assert.deepEqual(boss.stats?.map((s) => [s.table, s.inserted]), [
    ["public.employee", 1],
    ["public.employee", 2],
  ]);
  const b = boss.result?.[0] as {
    employee_id: number;
    reports: { last_name: string; reports_to: number }[];
  };
  assert.deepEqual(b.reports.map((r) => [r.last_name, r.reports_to]), [
    ["E", b.employee_id],
    ["F", b.employee_id],
  ]);
  // Nothing to write: no statement.
  const none = await same(invoiceTree, [], 0);
  assert.deepEqual(none.result, []);
  assert.deepEqual(none.stats?.map((s) => s.submitted), [0, 0]);
});

Deno.test("HTTP: a nested write is one round trip (begin, role, statements, read-back, commit)", async () => {
  const { uri } = await setup();
  const u = new URL(uri);
  const proxy = pgProxy(Number(u.port));
  u.port = String(proxy.port);
  const srv = await startServer(u.toString(), ["--pg.pool_size=1", "--dev"]);
  try {
    // Read once the proxy has seen every statement (6 per request), never after a fixed pause.
    const measure = async (body: unknown, n = 5) => {
      for (let i = 0; i < 2; i++) await (await srv.post("/svc", body)).text(); // prepare
      proxy.reset();
      const out: unknown[] = [];
      for (let i = 0; i < n; i++) {
        const r = await srv.post("/svc", body);
        assert.equal(r.status, 200, await r.clone().text());
        out.push(await r.json());
      }
      await waitFor(() => proxy.counts.executes >= 6 * n, { what: "every statement sent" });
      return { ...proxy.counts, n, out };
    };
    const before = Number((await exec(`select count(*)::int as n from invoice`))[0].n);
    const c = await measure({ query: invoiceTree, data: [invoice(5)], stats: true, sql: true });
    assert.equal(c.bursts, c.n, "one round trip per request");
    assert.equal(
      c.executes,
      6 * c.n,
      "begin, role switch, the invoice and lines statements, the read-back, commit",
    );
    const body = c.out[0] as { result: { lines: unknown[] }[]; stats: unknown[]; sql: unknown[] };
    assert.equal(body.result[0].lines.length, 5);
    assert.equal(body.stats.length, 2);
    assert.equal(body.sql.length, 3, "one entry per relation plus the read-back");
    const after = Number((await exec(`select count(*)::int as n from invoice`))[0].n);
    assert.equal(after, before + 2 + c.n, "committed");
    // rollback: the same round trip, nothing persists.
    const rb = await measure({ query: invoiceTree, data: [invoice(5)], rollback: true });
    assert.equal(rb.bursts, rb.n);
    assert.equal(rb.executes, 6 * rb.n);
    assert.equal((rb.out[0] as { lines: unknown[] }[])[0].lines.length, 5);
    assert.equal(Number((await exec(`select count(*)::int as n from invoice`))[0].n), after);
    // Triggers and RLS apply: the statement runs as the request's role.
    const tagTree = {
      relation: "tag",
      select: ["tag_id", "code", "notes"],
      join: {
        notes: { relation: "tag_note", on: { tag_id: "tag_id" }, select: ["note_id", "body"] },
      },
    };
    const ok = await srv.post("/svc", {
      query: tagTree,
      data: [{ code: "t1", notes: [{ body: "hi" }] }],
    });
    assert.equal(ok.status, 200);
    assert.equal((await ok.json())[0].notes[0].body, "HI", "BEFORE trigger ran");
    const denied = await srv.post("/svc", {
      query: tagTree,
      data: [{ code: "t2", notes: [{ body: "forbidden" }] }],
    });
    assert.equal(denied.status, 403, "RLS check (42501) for the anonymous role");
    assert.equal(denied.headers.get("x-svc-errorcode"), "PG_42501");
    await denied.text();
    assert.equal((await exec(`select count(*)::int as n from tag where code = 't2'`))[0].n, 0);
    // A failing write: the SQLSTATE mapping is kept (FK violation → 409), still one round trip:
    // the statements after the failure, the commit included, end the transaction in the same
    // burst (PostgreSQL answers the commit of a failed transaction with ROLLBACK), so no rollback
    // follows (begin, role, the invoice and lines statements, read-back, commit). A separate
    // "rollback" after the error once made it 2 bursts.
    proxy.reset();
    const bad = await srv.post("/svc", {
      query: invoiceTree,
      data: [{ ...invoice(1), customer_id: 999999 }],
    });
    assert.equal(bad.status, 409);
    await bad.text();
    // A failed request then asks, in a burst of its own (begin, role, the question, rollback),
    // whether the role holds a privilege on what it names: one it holds none on is answered as
    // unknown (docs/endpoint.md).
    await waitFor(() => proxy.counts.executes >= 10, { what: "the failing write's statements" });
    assert.equal(srv.server.runtime.inflight, 0);
    assert.deepEqual(proxy.counts, { bursts: 2, executes: 10, parses: 0 });
    assert.equal(Number((await exec(`select count(*)::int as n from invoice`))[0].n), after);
  } finally {
    await srv.stop();
    proxy.close();
  }
});

Deno.test("teardown", async () => {
  const { sql } = await setup();
  await sql.end();
  await stopDb();
});
