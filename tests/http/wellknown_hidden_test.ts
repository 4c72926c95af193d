/**
 * A well-known query over what a role cannot read is, to that role, a query that does not exist:
 * running it answers 404 WELL_KNOWN_UNKNOWN_QUERY (it answered 403 PG_42501 naming the table), and
 * neither its generated client nor database.json describe it (database.ts listed its result type:
 * the hidden table's columns). So is one naming a column the role holds no privilege on, of a table
 * it reads other columns of. A role that may read it runs it and sees it described. Through real
 * HTTP against a real PostgreSQL, POST, GET and in a batch.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const fixture = `
create table staff_notes (id int primary key, secret_column text);
insert into staff_notes values (1, 'x');
grant select on staff_notes to app_user;
create function staff_count(a artist) returns int language sql stable as 'select 1';
revoke execute on function staff_count(artist) from public;
grant execute on function staff_count(artist) to app_user;
create type note_kind as enum ('memo', 'plan');
create table kinded_notes (id int primary key, kind note_kind);
grant select on kinded_notes to app_user;
create table half_notes (id int primary key, pub text, hush text);
insert into half_notes values (1, 'open', 'closed');
grant select (id, pub) on half_notes to "~anonymous";
grant select on half_notes to app_user;
`;
const uri = await chinookDb("wellknown_hidden", fixture);
const dir = await Deno.makeTempDir({ prefix: "svc-wk-hidden-" });
await Deno.writeTextFile(
  `${dir}/notes.json`,
  JSON.stringify({ name: "notes", query: { relation: "staff_notes" } }),
);
await Deno.writeTextFile(
  `${dir}/counted.json`,
  JSON.stringify({
    name: "counted",
    query: { relation: "artist", select: ["artist_id", "staff_count"], limit: 1 },
  }),
);
// Over a relation the anonymous role reads some columns of: all of them, and only those.
await Deno.writeTextFile(
  `${dir}/half.json`,
  JSON.stringify({ name: "half", query: { relation: "half_notes" } }),
);
await Deno.writeTextFile(
  `${dir}/half_pub.json`,
  JSON.stringify({ name: "half_pub", query: { relation: "half_notes", select: ["id", "pub"] } }),
);
await Deno.writeTextFile(
  `${dir}/half_where.json`,
  JSON.stringify({
    name: "half_where",
    query: { relation: "half_notes", select: ["id"], where: ["=", "hush", ["closed"]] },
  }),
);
// Broken for everyone (an enum compared with text: PostgreSQL's 42883 before any privilege check).
await Deno.writeTextFile(
  `${dir}/broken.json`,
  JSON.stringify({
    name: "broken",
    params: { k: { type: "string" } },
    query: { relation: "kinded_notes", where: ["=", "kind", ["$param", "k", "text"]] },
  }),
);
await Deno.writeTextFile(
  `${dir}/open.json`,
  JSON.stringify({ name: "open_one", query: { relation: "genre", limit: 1 } }),
);
const srv = await startServer(uri, [`--pg.query.wellknown_path=${dir}`, "--dev"]);
const t = now();
const user = cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }));

async function call(path: string, body?: unknown, headers?: HeadersInit) {
  const r = body === undefined ? await srv.get(path, headers) : await srv.post(path, body, headers);
  const text = await r.text();
  const json = (r.headers.get("content-type") ?? "").includes("json") ? JSON.parse(text) : null;
  return { status: r.status, text, json };
}

Deno.test("anonymous: a well-known query over a hidden table or function does not exist", async () => {
  for (const name of ["notes", "counted"]) {
    const post = await call("/svc", { wellknown: name });
    assert.equal(post.status, 404, post.text);
    assert.equal(post.json.code, "WELL_KNOWN_UNKNOWN_QUERY");
    assert.ok(!post.text.includes("staff"), post.text);
    const get = await call(`/svc?wellknown=${name}`);
    assert.equal(get.status, 404, get.text);
    assert.equal(get.json.code, "WELL_KNOWN_UNKNOWN_QUERY");
    const batch = await call("/svc", [{ wellknown: "open_one" }, { wellknown: name }]);
    assert.equal(batch.status, 404, batch.text);
    assert.equal(batch.json.code, "WELL_KNOWN_UNKNOWN_QUERY");
    assert.equal(batch.json.details.index, 1);
    // The same answer as a name never registered.
    const none = await call("/svc", { wellknown: "no_such_query" });
    assert.equal(none.status, post.status);
    assert.equal(none.json.code, post.json.code);
  }
  const ts = await call("/svc/database.ts");
  assert.equal(ts.status, 200);
  assert.ok(ts.text.includes('"open_one"'), "a query it may run is described");
  assert.ok(!ts.text.includes('"notes"') && !ts.text.includes("secret_column"), "notes hidden");
  assert.ok(!ts.text.includes('"counted"'), "counted hidden");
  const json = await call("/svc/database.json");
  const names = json.json.wellknown.map((w: { name: string }) => w.name).sort();
  assert.deepEqual(names, ["half_pub", "open_one"]);
});

Deno.test("any error of a well-known query over what the role cannot read answers as an unknown query", async () => {
  // Found by a new user: the broken query answered the anonymous role 400 PG_42883 (telling it the
  // query and its table exist) where a permission denial answers 404.
  const anon = await call("/svc", { wellknown: "broken", params: { k: "memo" } });
  assert.equal(anon.status, 404, anon.text);
  assert.equal(anon.json.code, "WELL_KNOWN_UNKNOWN_QUERY");
  const get = await call("/svc?wellknown=broken&params.k=memo");
  assert.equal(get.status, 404, get.text);
  // A role that may read the table gets the query's own error.
  const mine = await call("/svc", { wellknown: "broken", params: { k: "memo" } }, user);
  assert.equal(mine.status, 400, mine.text);
  assert.equal(mine.json.code, "PG_42883");
});

Deno.test("anonymous: a well-known query naming a column it holds no privilege on does not exist", async () => {
  for (const name of ["half", "half_where"]) {
    const post = await call("/svc", { wellknown: name });
    assert.equal(post.status, 404, post.text);
    assert.equal(post.json.code, "WELL_KNOWN_UNKNOWN_QUERY");
  }
  const ok = await call("/svc", { wellknown: "half_pub" });
  assert.equal(ok.status, 200, ok.text);
  assert.deepEqual(ok.json, [{ id: 1, pub: "open" }]);
  const ts = await call("/svc/database.ts");
  const wk = ts.text.slice(ts.text.indexOf("export interface WellKnowns"));
  assert.ok(wk.includes('"half_pub"'), "a query it may run is described");
  assert.ok(!wk.includes('"half"') && !wk.includes('"half_where"'), wk);
  assert.ok(!ts.text.includes("hush"), "the hidden column is described nowhere");
});

Deno.test("a role that may read them runs them and sees them described", async () => {
  const notes = await call("/svc", { wellknown: "notes" }, user);
  assert.equal(notes.status, 200, notes.text);
  assert.deepEqual(notes.json, [{ id: 1, secret_column: "x" }]);
  const counted = await call("/svc?wellknown=counted", undefined, user);
  assert.equal(counted.status, 200, counted.text);
  const ts = await call("/svc/database.ts", undefined, user);
  assert.ok(ts.text.includes('"notes"') && ts.text.includes("secret_column"));
  assert.ok(ts.text.includes('"counted"'));
  const json = await call("/svc/database.json", undefined, user);
  const names = json.json.wellknown.map((w: { name: string }) => w.name).sort();
  assert.deepEqual(names, [
    "broken",
    "counted",
    "half",
    "half_pub",
    "half_where",
    "notes",
    "open_one",
  ]);
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
  await Deno.remove(dir, { recursive: true });
});
