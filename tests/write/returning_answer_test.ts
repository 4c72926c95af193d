/**
 * A plain single-statement insert of a root relation answered from its own `RETURNING` (no
 * read-back statement), through real HTTP against a real PostgreSQL; and every case outside that
 * subset still read back, answering the final state (docs/endpoint.md "Writes").
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { postSvc, startServer } from "../helpers/server.ts";
import { sqlClient } from "../helpers/sql.ts";

const uri = await chinookDb(
  "returning_answer",
  `
  create table item (
    id int generated always as identity primary key,
    label text not null,
    amount numeric,
    at timestamp default '2026-01-02 03:04:05.678',
    atz timestamptz default '2026-01-02 03:04:05.678+02',
    doc json,
    docb jsonb,
    tags text[],
    nums int[],
    note text,
    flag boolean default true,
    twice numeric generated always as (amount * 2) stored
  );
  create table coded (code text primary key, n int);
  create table plain (code text primary key, n int);
  create table child (id serial primary key, item_id int references item, name text);
  create function shout(item) returns text language sql stable as $$ select upper($1.label) $$;
  create table guarded (code text primary key, label text not null);
  alter table guarded enable row level security;
  create policy ins on guarded for insert with check (true);
  create policy sel on guarded for select using (label <> 'hidden');
  create table bumped (id serial primary key, label text not null);
  create function bump() returns trigger language plpgsql as $$
    begin update bumped set label = label || ' (after)' where id = new.id; return null; end $$;
  create trigger bump after insert on bumped for each row execute function bump();
  create table product (id serial primary key, sku text unique not null, name text);
  grant usage on schema public to "~anonymous";
  grant select, insert, update, delete on all tables in schema public to "~anonymous";
  grant usage on all sequences in schema public to "~anonymous";
`,
);
const srv = await startServer(uri, ["--dev"]);
const sql = sqlClient(uri);

const post = (body: unknown) => postSvc(srv, body);

const itemSelect = [
  "id",
  "label",
  "amount",
  "at",
  "atz",
  "doc",
  "docb",
  "tags",
  "nums",
  "note",
  "flag",
  "twice",
];

const items = [
  {
    label: 'Zürich ✓ 日本 "q" \\ \n end',
    amount: 12.5,
    doc: { b: 1, a: [1, 2.50, "x"] },
    docb: { b: 1, a: [1, 2.5, "x"] },
    tags: ["a", "b c", "ü"],
    nums: [3, 1, 2],
    note: null,
  },
  {
    label: "second",
    amount: -0.001,
    doc: null,
    docb: null,
    tags: [],
    nums: null,
    note: "n",
  },
  { label: "third", amount: 1e21, doc: [], docb: "s", tags: null, nums: [], note: "" },
];

/** The same select over the given ids, read by the read compiler (what a read-back answers). */
async function readIds(relation: string, select: unknown[], ids: unknown[], key = "id") {
  const r = await post({ relation, select, where: ["in", key, ...ids] });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const byKey = new Map(r.body.map((row: Record<string, unknown>) => [row[key], row]));
  assert.equal(byKey.size, ids.length);
  return ids.map((id) => byKey.get(id));
}

Deno.test("a plain insert answers from RETURNING: one statement, the read-back's answer", async () => {
  const r = await post({ query: { relation: "item", select: itemSelect }, data: items, sql: true });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  // One statement: the insert itself, no read-back.
  assert.equal(r.body.sql.length, 1, JSON.stringify(r.body.sql));
  assert.match(r.body.sql[0].select, /RETURNING/);
  const ids = r.body.result.map((x: { id: number }) => x.id);
  assert.deepEqual(r.body.result.map((x: { label: string }) => x.label), items.map((i) => i.label));
  assert.deepEqual(r.body.result, await readIds("item", itemSelect, ids));
  // Defaults and generated columns are in the answer.
  assert.equal(r.body.result[0].flag, true);
  assert.equal(r.body.result[0].twice, 25);
  assert.equal(r.body.result[0].at, "2026-01-02T03:04:05.678");
  // The whole-row form (every column in table order) and a bare answer (no envelope).
  const whole = await post({ query: { relation: "item", select: ["own"] }, data: items });
  assert.equal(whole.status, 200, JSON.stringify(whole.body));
  const wids = whole.body.map((x: { id: number }) => x.id);
  assert.deepEqual(whole.body, await readIds("item", ["own"], wids));
  // A single row, and a subset of the columns in another order.
  const one = await post({
    query: { relation: "item", select: ["note", "id", "label", "amount"] },
    data: [{ label: "one", amount: "7.25", note: "é" }],
    sql: true,
    stats: true,
  });
  assert.equal(one.status, 200, JSON.stringify(one.body));
  assert.equal(one.body.sql.length, 1);
  assert.deepEqual(one.body.stats, [
    { path: [], table: "public.item", submitted: 1, inserted: 1, updated: 0, deleted: 0 },
  ]);
  assert.deepEqual(
    one.body.result,
    await readIds("item", ["note", "id", "label", "amount"], [one.body.result[0].id]),
  );
  assert.deepEqual(Object.keys(one.body.result[0]), ["note", "id", "label", "amount"]);
});

Deno.test("RETURNING keeps the payload order, in the batch path and under rollback too", async () => {
  const data = [{ code: "ž", n: 1 }, { code: "a", n: 2 }, { code: "m", n: 3 }, { code: "B", n: 4 }];
  const r = await post({ query: { relation: "coded", select: ["code", "n"] }, data, sql: true });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.sql.length, 1);
  assert.deepEqual(r.body.result, data);
  const batch = await post([
    { query: { relation: "coded", select: ["n", "code"] }, data: [{ code: "q", n: 9 }], sql: true },
    { relation: "coded", select: ["code"], where: ["=", "code", ["q"]] },
  ]);
  assert.equal(batch.status, 200, JSON.stringify(batch.body));
  assert.deepEqual(batch.body[0].result, [{ n: 9, code: "q" }]);
  assert.equal(batch.body[0].sql.length, 1);
  assert.deepEqual(batch.body[1], [{ code: "q" }]);
  const rb = await post({
    query: { relation: "coded", select: ["code"] },
    data: [{ code: "rb" }],
    rollback: true,
  });
  assert.equal(rb.status, 200, JSON.stringify(rb.body));
  assert.deepEqual(rb.body, [{ code: "rb" }]);
  assert.deepEqual((await sql`select count(*)::int as n from coded where code = 'rb'`)[0], {
    n: 0,
  });
});

Deno.test("outside the subset the write is read back and answers the final state", async () => {
  // An AFTER INSERT trigger changes the row: the read-back sees its change.
  const t = await post({
    query: { relation: "bumped", select: ["id", "label"] },
    data: [{ label: "x" }, { label: "y" }],
    sql: true,
  });
  assert.equal(t.status, 200, JSON.stringify(t.body));
  assert.equal(t.body.sql.length, 2);
  assert.deepEqual(t.body.result.map((x: { label: string }) => x.label), [
    "x (after)",
    "y (after)",
  ]);
  // Row-level security: a row the SELECT policy hides is left out of the answer (RETURNING would
  // raise instead), and the row is written.
  const g = await post({
    query: { relation: "guarded", select: ["code", "label"] },
    data: [{ code: "g1", label: "shown" }, { code: "g2", label: "hidden" }],
    sql: true,
  });
  assert.equal(g.status, 200, JSON.stringify(g.body));
  assert.equal(g.body.sql.length, 2);
  assert.deepEqual(g.body.result, [{ code: "g1", label: "shown" }]);
  assert.deepEqual((await sql`select count(*)::int as n from guarded where label = 'hidden'`)[0], {
    n: 1,
  });
  // A computed field in the select.
  const c = await post({
    query: { relation: "item", select: ["label", "shout", "id"] },
    data: [{ label: "calm" }],
    sql: true,
  });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  assert.equal(c.body.sql.length, 2);
  assert.deepEqual(c.body.result.map((x: { shout: string }) => x.shout), ["CALM"]);
  // A join in the select (nothing written through it).
  const j = await post({
    query: {
      relation: "item",
      select: ["id", "label", "children"],
      join: { children: { relation: "child", on: { item_id: "id" }, select: ["id", "name"] } },
    },
    data: [{ label: "parent" }],
    sql: true,
  });
  assert.equal(j.status, 200, JSON.stringify(j.body));
  assert.equal(j.body.sql.length, 2);
  assert.deepEqual(j.body.result.map((x: { children: unknown[] }) => x.children), [[]]);
  // An upsert.
  await sql`insert into product (sku, name) values ('A', 'old')`;
  const u = await post({
    query: {
      relation: "product",
      select: ["id", "sku", "name"],
      write_mode: "upsert",
      on_conflict: ["sku"],
    },
    data: [{ sku: "A", name: "new" }, { sku: "B", name: "bee" }],
    sql: true,
  });
  assert.equal(u.status, 200, JSON.stringify(u.body));
  assert.equal(u.body.sql.length, 2);
  assert.deepEqual(u.body.result.map((x: { name: string }) => x.name), ["new", "bee"]);
});

Deno.test("a reload picks up a trigger added later: the table is read back from then on", async () => {
  const before = await post({
    query: { relation: "coded", select: ["code", "n"] },
    data: [{ code: "r1", n: 1 }],
    sql: true,
  });
  assert.equal(before.body.sql.length, 1);
  await sql.unsafe(`
    create function coded_bump() returns trigger language plpgsql as $$
      begin update coded set n = n + 100 where code = new.code; return null; end $$`);
  await sql.unsafe(
    `create trigger coded_bump after insert on coded for each row execute function coded_bump()`,
  );
  assert.equal(await srv.server.runtime.reload("signal"), true);
  const after = await post({
    query: { relation: "coded", select: ["code", "n"] },
    data: [{ code: "r2", n: 2 }],
    sql: true,
  });
  assert.equal(after.status, 200, JSON.stringify(after.body));
  assert.equal(after.body.sql.length, 2);
  assert.deepEqual(after.body.result, [{ code: "r2", n: 102 }]);
});

Deno.test("the row-size cap refuses an oversized answer row inside PostgreSQL: nothing written", async () => {
  const capped = await startServer(uri, ["--dev", "--pg.query.max_row_size=4096"]);
  try {
    const query = { relation: "plain", select: ["code", "n"] };
    const big = await capped.post("/svc", { query, data: [{ code: "x".repeat(5000), n: 1 }] });
    assert.equal(big.status, 400);
    assert.equal(big.headers.get("x-svc-errorcode"), "QUERY_RESULT_TOO_LARGE");
    await big.body?.cancel();
    assert.deepEqual(
      (await sql`select count(*)::int as n from plain where n = 1 and length(code) = 5000`)[0],
      { n: 0 },
    );
    const ok = await capped.post("/svc", { query, data: [{ code: "small", n: 1 }], sql: true });
    const body = await ok.json();
    assert.equal(ok.status, 200, JSON.stringify(body));
    assert.equal(body.sql.length, 1);
    assert.match(body.sql[0].select, /svc:row_too_large:/);
    assert.deepEqual(body.result, [{ code: "small", n: 1 }]);
  } finally {
    await capped.stop();
  }
});

Deno.test("teardown", async () => {
  await sql.end();
  await srv.stop();
  await stopDb();
});
