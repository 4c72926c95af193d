/**
 * GET /svc reads in a read-only transaction (docs/security.md, "Cross-site requests"): a browser
 * follows a link from any site with its `SameSite=Lax` session cookie, so the GET form must not be
 * able to write. Found by a hostile client: `GET /svc?function=bump` (a VOLATILE function that
 * inserts) ran and committed, for a GET and a HEAD, and so did a VOLATILE computed field. Now such
 * a write is 405 `PG_25006` and nothing is written, while POST still writes and a VOLATILE
 * function that writes nothing (random()) still reads over GET; `count`, a second statement, is
 * refused with a VOLATILE function (it ran it twice). Also here: a view's
 * `WITH CHECK OPTION` and an exclusion constraint refusing a write are the client's 400 and 409,
 * not 500 (the same hostile client).
 */
import assert from "node:assert/strict";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const DB = "get_read_only";
const FIXTURE = `
create table bumps (id serial primary key, who text not null);
grant select, insert on bumps to app_user;
grant usage on sequence bumps_id_seq to app_user;
create function bump(who text) returns int volatile language sql
  as $$ insert into bumps (who) values (who) returning id $$;
create function artist_bump(a artist) returns int volatile language sql
  as $$ insert into bumps (who) values (a.name) returning id $$;
create function dice() returns float8 volatile language sql as $$ select random() $$;
create table pets (id serial primary key, name text not null);
grant select, insert on pets to app_user;
grant usage on sequence pets_id_seq to app_user;
create function pet_bump(p pets) returns int volatile language sql
  as $$ insert into bumps (who) values (p.name) returning id $$;
grant execute on function pet_bump(pets) to app_user;
grant execute on function bump(text), artist_bump(artist), dice() to app_user;
create extension if not exists btree_gist;
create table booking (id serial primary key, r int4range not null,
  exclude using gist (r with &&));
grant select, insert on booking to app_user;
grant usage on sequence booking_id_seq to app_user;
create view cheap_tracks as select track_id, name, media_type_id, milliseconds, unit_price
  from track where unit_price < 1 with check option;
grant select, insert on cheap_tracks to app_user;
`;

const srv = await startServer(await chinookDb(DB, FIXTURE), [
  "--pg.query.allow_count=true",
  "--pg.query.allow_query_plan=true",
]);
const t = now();
const session = cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }));

async function bumps(): Promise<number> {
  const out = await psql("select count(*) from bumps", DB);
  return Number(out.trim().split("\n").find((l) => /^\s*\d+\s*$/.test(l))!.trim());
}

Deno.test("GET and HEAD /svc cannot write: 405 PG_25006, nothing written", async () => {
  const before = await bumps();
  for (
    const [method, query] of [
      ["GET", "function=bump&arguments.who=csrf"],
      ["HEAD", "function=bump&arguments.who=csrf-head"],
      ["GET", "relation=artist&select=artist_id,artist_bump&limit=2"],
    ]
  ) {
    const res = await fetch(`${srv.url}/svc?${query}`, { method, headers: session });
    await res.body?.cancel();
    assert.equal(res.status, 405, `${method} ${query}`);
    assert.equal(res.headers.get("x-svc-errorcode"), "PG_25006");
    assert.equal(res.headers.get("allow"), "POST");
  }
  assert.equal(await bumps(), before, "a GET wrote");
  // POST still writes (a JSON body: a cross-site page cannot send one without a preflight).
  const post = await srv.post("/svc", { function: "bump", arguments: { who: ["post"] } }, session);
  assert.equal(post.status, 200, await post.text());
  assert.equal(await bumps(), before + 1);
  // A VOLATILE function that writes nothing reads over GET as before.
  const dice = await fetch(`${srv.url}/svc?function=dice`, { headers: session });
  assert.equal(dice.status, 200);
  const [{ dice: v }] = await dice.json();
  assert.ok(v >= 0 && v < 1);
  // And a plain GET read of the same session is unaffected.
  const read = await fetch(`${srv.url}/svc?relation=bumps&select=who&order_by=id`, {
    headers: session,
  });
  assert.equal(read.status, 200);
  assert.deepEqual((await read.json()).at(-1), { who: "post" });
});

Deno.test("count with a VOLATILE function is 400 (it would run twice), nothing written", async () => {
  // Found by a hostile client: count ran a writing function a second time for its count.
  const before = await bumps();
  for (
    const query of [
      { function: "bump", arguments: { who: ["c"] } },
      { relation: "artist", select: ["artist_id", "artist_bump"], limit: 1 },
    ]
  ) {
    const res = await srv.post("/svc", { query, count: true }, session);
    const text = await res.text();
    assert.equal(res.status, 400, text);
    assert.equal(JSON.parse(text).details.pointer, "/count");
  }
  assert.equal(await bumps(), before);
  // Without count it runs once; count over what writes nothing works as before.
  const once = await srv.post(
    "/svc",
    { query: { function: "bump", arguments: { who: ["c"] } } },
    session,
  );
  assert.equal(once.status, 200, await once.text());
  assert.equal(await bumps(), before + 1);
  const counted = await srv.post(
    "/svc",
    { query: { relation: "artist", limit: 1 }, count: true },
    session,
  );
  assert.equal((await counted.json()).count, 275);
});

Deno.test("query_plan of a write runs a read-back calling a VOLATILE function once", async () => {
  // Found by a black-box audit: the read-back's EXPLAIN ANALYZE ran its writing function again.
  const before = await bumps();
  const res = await srv.post("/svc", {
    query: { relation: "pets", select: ["id", "name", "pet_bump"] },
    data: [{ name: "Rex" }],
    query_plan: true,
  }, session);
  const text = await res.text();
  assert.equal(res.status, 200, text);
  const body = JSON.parse(text);
  assert.equal(body.query_plan.length, 2, "the insert's and the read-back's");
  assert.ok(body.query_plan[1].Plan, "the read-back's plan (not analyzed)");
  assert.equal(await bumps(), before + 1, "the computed field ran once");
});

Deno.test("constraints refusing a write: WITH CHECK OPTION is 400, an exclusion 409", async () => {
  const check = await srv.post("/svc", {
    query: {
      relation: "cheap_tracks",
      on_conflict: ["track_id"],
      select: ["track_id", "name", "media_type_id", "milliseconds", "unit_price"],
    },
    data: [{ name: "x", media_type_id: 1, milliseconds: 1, unit_price: 5 }],
  }, session);
  const checkText = await check.text();
  assert.equal(check.status, 400, checkText);
  assert.equal(JSON.parse(checkText).code, "PG_44000");
  const overlap = await srv.post("/svc", {
    query: { relation: "booking", select: ["id", "r"] },
    data: [{ r: "[1,10)" }, { r: "[5,7)" }],
  }, session);
  const overlapText = await overlap.text();
  assert.equal(overlap.status, 409, overlapText);
  assert.equal(JSON.parse(overlapText).code, "PG_23P01");
  assert.match(await psql("select count(*) from booking", DB), /\b0\b/);
});

Deno.test("stop", async () => {
  await srv.stop();
  await stopDb();
});
