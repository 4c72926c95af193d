/**
 * `pg.schemas`, through real HTTP against a real PostgreSQL: with `pg.schemas=public`, a table,
 * function, route, computed field, foreign key and type of schema `private` answer like names that
 * do not exist (no suggestion naming them) and are absent from database.json and database.ts;
 * without it (the default) every schema is served, as before.
 */
import assert from "node:assert/strict";
import { emptyDb } from "../helpers/db.ts";
import { startServer, type TestServer } from "../helpers/server.ts";
import { loadConfig } from "../../src/config/load.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/bearer.sql", import.meta.url));
// A type kept in the unexposed schema that an exposed column has (database.json names it).
const level = `
create type private.level as enum ('low', 'high');
create table ticket (id int primary key, level private.level not null);
insert into ticket values (1, 'high');
grant select on ticket to "~anonymous";
`;
const uri = await emptyDb("exposed", fixture + level);
const all = await startServer(uri, ["--http.typescript.enable=true"]);
const pub = await startServer(uri, ["--http.typescript.enable=true", "--pg.schemas=public"]);

async function post(srv: TestServer, body: unknown) {
  const res = await srv.post("/svc", body);
  return { status: res.status, body: await res.json(), code: res.headers.get("x-svc-errorcode") };
}

const READS = {
  table: { relation: "secret", schema: "private", select: ["word"] },
  "bare table name": { relation: "secret", select: ["word"] },
  function: { function: "hidden", schema: "private" },
  "bare function name": { function: "hidden" },
};

Deno.test("by default every schema is exposed, as before", async () => {
  for (const [what, q] of Object.entries(READS)) {
    const r = await post(all, q);
    assert.equal(r.status, 200, `${what}: ${JSON.stringify(r.body)}`);
    assert.match(JSON.stringify(r.body[0]), /swordfish/, what);
  }
  const route = await all.get("/hidden");
  assert.equal(route.status, 200);
  assert.equal((await route.json()).word, "swordfish");
  const doc = await (await all.get("/svc/database.json")).json();
  assert.ok(doc.schemas.some((s: { name: string }) => s.name === "private"));
});

Deno.test("pg.schemas=public: another schema's table and function are 404 like unknown names", async () => {
  const unknown = await post(pub, { relation: "no_such_thing", schema: "nowhere" });
  assert.equal(unknown.status, 404);
  for (const [what, q] of Object.entries(READS)) {
    const r = await post(pub, q);
    assert.equal(r.status, 404, `${what}: ${JSON.stringify(r.body)}`);
    assert.equal(r.code, "QUERY_UNKNOWN_RELATION", what);
    assert.deepEqual(Object.keys(r.body).sort(), Object.keys(unknown.body).sort(), what);
    const text = JSON.stringify(r.body);
    assert.ok(!/private\./.test(text) && !/swordfish/.test(text), `${what}: ${text}`);
  }
  // A near miss suggests nothing hidden either (with every schema exposed it suggests 'secret').
  for (const q of [{ relation: "secrets" }, { function: "hiddn" }]) {
    assert.match((await post(all, q)).body.message, /did you mean/);
    const near = await post(pub, q);
    assert.equal(near.status, 404);
    assert.doesNotMatch(near.body.message, /did you mean|secret'|hidden'/, near.body.message);
  }
  // The GET form too.
  const get = await pub.get("/svc?relation=secret&schema=private");
  assert.equal(get.status, 404);
  assert.equal(get.headers.get("x-svc-errorcode"), "QUERY_UNKNOWN_RELATION");
  await get.body?.cancel();
});

Deno.test("pg.schemas=public: routes, computed fields, joins and casts of other schemas are gone", async () => {
  const route = await pub.get("/hidden");
  assert.equal(route.status, 404);
  assert.equal(route.headers.get("x-svc-errorcode"), "HTTP_NOT_FOUND");
  await route.body?.cancel();
  // note_secret(note) lives in private: not a computed field of public.note.
  const computedAll = await post(all, { relation: "note", select: ["id", "note_secret"] });
  assert.equal(computedAll.status, 200, JSON.stringify(computedAll.body));
  const computed = await post(pub, { relation: "note", select: ["id", "note_secret"] });
  assert.equal(computed.status, 400);
  assert.equal(computed.code, "QUERY_UNKNOWN_COLUMN");
  // owner_of's foreign key points into private: no join.
  const join = {
    relation: "owner_of",
    join: { s: { relation: "secret", schema: "private", on: { id: "secret_id" } } },
  };
  const joinedAll = await post(all, join);
  assert.equal(joinedAll.status, 200, JSON.stringify(joinedAll.body));
  const joined = await post(pub, join);
  assert.equal(joined.status, 404, JSON.stringify(joined.body));
  assert.equal(joined.code, "QUERY_UNKNOWN_RELATION");
  // A type of private is not a cast target.
  const cast = { relation: "note", select: { mood: ["cast", ["happy"], "private.mood"] } };
  assert.equal((await post(all, cast)).status, 200);
  const refused = await post(pub, cast);
  assert.equal(refused.status, 400, JSON.stringify(refused.body));
  assert.equal(refused.code, "QUERY_UNKNOWN_TYPE");
  // …but one an exposed column has stays castable: a value compared with the column as its type.
  const byLevel = {
    relation: "ticket",
    select: ["id"],
    where: ["=", "level", ["cast", ["high"], "private.level"]],
  };
  const levelled = await post(pub, byLevel);
  assert.equal(levelled.status, 200, JSON.stringify(levelled.body));
  assert.deepEqual(levelled.body, [{ id: 1 }]);
});

Deno.test("pg.schemas=public: database.json and database.ts leave the other schema out", async () => {
  const doc = await (await pub.get("/svc/database.json")).json();
  assert.deepEqual(doc.schemas.map((s: { name: string }) => s.name), ["public"]);
  const text = JSON.stringify(doc);
  for (const name of ["secret", "hidden", "note_secret", "private"]) {
    assert.ok(!text.includes(`"${name}"`), name);
  }
  const ts = await (await pub.get("/svc/database.ts")).text();
  assert.ok(!/\bsecret\b|\bhidden\b|private\./.test(ts), "database.ts names nothing of private");
  const tsAll = await (await all.get("/svc/database.ts")).text();
  assert.match(tsAll, /private\.secret/);
});

Deno.test("a route configured in a schema outside pg.schemas is a configuration error", () => {
  assert.throws(
    () =>
      loadConfig({
        args: ["--pg.schemas=api", "--route.private.hidden_route.path=/h"],
        env: {},
      }),
    /route\.private\.\*: schema private is not in pg\.schemas/,
  );
});

Deno.test("stop the servers", async () => {
  await all.stop();
  await pub.stop();
});
