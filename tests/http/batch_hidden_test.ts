/**
 * A batch cannot tell a hidden relation from a missing one by streaming first. Its answer streams
 * once it outgrows the answer buffer (1 MiB), its status going with the first bytes; a later item
 * naming a relation or function the role holds no privilege on used to fail mid-stream (200, a
 * truncated answer) where a name that does not exist fails before anything runs (404). Through real
 * HTTP against a real PostgreSQL: both answer 404 QUERY_UNKNOWN_RELATION with the item's index, for
 * a relation, a join inside a later item, a function and a write.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const fixture = `
create table hidden_t (id int primary key);
create table open_child (id int primary key, parent int references hidden_t);
grant select on open_child to "~anonymous", app_user;
create function hidden_fn() returns setof int language sql as 'select 1';
revoke execute on function hidden_fn() from public;
`;
const uri = await chinookDb("batch_hidden", fixture);
const srv = await startServer(uri);

/** Three full track reads: ≈ 2 MiB of answer before the item under test. */
const BIG = [{ relation: "track" }, { relation: "track" }, { relation: "track" }];

async function batch(last: unknown, headers?: HeadersInit) {
  const r = await srv.post("/svc", [...BIG, last], headers);
  const text = await r.text();
  return { status: r.status, text };
}

async function sameAsMissing(hidden: unknown, missing: unknown, headers?: HeadersInit) {
  const h = await batch(hidden, headers);
  const m = await batch(missing, headers);
  for (const [what, a] of [["hidden", h], ["missing", m]] as const) {
    assert.equal(a.status, 404, `${what}: ${a.status} ${a.text.slice(-200)}`);
    const body = JSON.parse(a.text); // a whole answer, not a truncated stream
    assert.equal(body.code, "QUERY_UNKNOWN_RELATION", a.text);
    assert.equal(body.details.index, 3, a.text);
  }
}

Deno.test("a hidden relation after a streamed part answers as a missing one", async () => {
  await sameAsMissing({ relation: "hidden_t" }, { relation: "no_such_table" });
});

Deno.test("a hidden join inside a later item answers as a missing one", async () => {
  await sameAsMissing(
    { relation: "open_child", join: { p: { relation: "hidden_t", on: { parent: "id" } } } },
    { relation: "open_child", join: { p: { relation: "no_such_table", on: { parent: "id" } } } },
  );
});

Deno.test("a function without EXECUTE after a streamed part answers as a missing one", async () => {
  await sameAsMissing({ function: "hidden_fn" }, { function: "no_such_fn" });
});

Deno.test("a write to a hidden table after a streamed part answers as a missing one", async () => {
  const t = now();
  const session = cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }));
  await sameAsMissing(
    { query: { relation: "hidden_t", select: ["id"] }, data: [{ id: 1 }] },
    { query: { relation: "no_such_table", select: ["id"] }, data: [{ id: 1 }] },
    session,
  );
});

Deno.test("a readable batch still streams: 200 and every item", async () => {
  const r = await batch({ relation: "open_child" });
  assert.equal(r.status, 200);
  const body = JSON.parse(r.text);
  assert.equal(body.length, 4);
  assert.ok(body[0].length > 3000);
  assert.deepEqual(body[3], []);
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
