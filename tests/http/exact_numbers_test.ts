/**
 * Numbers a double cannot hold (ids beyond 2^53, numerics of more than ~16 digits) reach
 * PostgreSQL as written (src/formats/json.ts), in a POST body, the GET form, write data, jsonb
 * values, function arguments, a route's JSON body and well-known parameters. Found by a hostile probe: a read of id
 * 9007199254740993 answered row 9007199254740992, and an upsert of it overwrote that other row.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { postSvc, startServer } from "../helpers/server.ts";

const FIXTURE = `
do $$ begin
  if not exists (select from pg_roles where rolname = '~anonymous') then create role "~anonymous" nologin; end if;
end $$;
create table big_ids (id bigint primary key, note text, amount numeric(40,20), doc jsonb);
insert into big_ids values (9007199254740992, 'row A', 0, null), (9007199254740993, 'row B', 0, null);
create function big_note(id bigint) returns text language sql stable as
  $$ select note from big_ids b where b.id = big_note.id $$;
create function big_route(id bigint) returns text language sql stable as
  $$ select note from big_ids b where b.id = big_route.id $$;
comment on function big_route(bigint) is 'route:: path: /big, method: POST';
grant execute on function big_route(bigint) to "~anonymous";
grant usage on schema public to "~anonymous";
grant select, insert, update on big_ids to "~anonymous";
grant execute on function big_note(bigint) to "~anonymous";
`;

const uri = await emptyDb("exact_numbers", FIXTURE);
const sql = sqlClient(uri);
const wellknown = await Deno.makeTempDir();
await Deno.writeTextFile(
  `${wellknown}/by_id.json`,
  JSON.stringify({
    name: "by_id",
    params: { id: { type: "integer" } },
    query: {
      relation: "big_ids",
      select: ["note"],
      where: ["=", "id", ["$param", "id", "bigint"]],
    },
  }),
);
// A definition file's default keeps every digit too (written as text: JSON.stringify here would
// round it).
await Deno.writeTextFile(
  `${wellknown}/row_b.json`,
  `{"name":"row_b","params":{"id":{"type":"integer","default":9007199254740993}},` +
    `"query":{"relation":"big_ids","select":["note"],"where":["=","id",["$param","id","bigint"]]}}`,
);
const srv = await startServer(uri, [`--pg.query.wellknown_path=${wellknown}`]);
const B = "9007199254740993";

Deno.test("a read by an id beyond 2^53 finds that row: POST, GET, function argument, well-known", async () => {
  // Sent as text: a JSON.parse here would round it before svc sees it.
  const text = `{"relation":"big_ids","select":["note"],"where":["=","id",${B}]}`;
  const res = await fetch(`${srv.url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: text,
  });
  assert.deepEqual(await res.json(), [{ note: "row B" }]);
  const get = await srv.get(`/svc?relation=big_ids&select=note&where=eq(id,${B})`);
  assert.deepEqual(await get.json(), [{ note: "row B" }]);
  const fn = await fetch(`${srv.url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: `{"function":"big_note","arguments":{"id":${B}}}`,
  });
  assert.equal(await fn.text(), '[{"big_note":"row B"}]');
  const route = await fetch(`${srv.url}/big`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: `{"id":${B}}`,
  });
  assert.equal(await route.text(), '"row B"');
  const wk = await srv.get(`/svc?wellknown=by_id&params.id=${B}`);
  assert.deepEqual(await wk.json(), [{ note: "row B" }]);
  const byDefault = await srv.get(`/svc?wellknown=row_b`);
  assert.deepEqual(await byDefault.json(), [{ note: "row B" }]);
});

Deno.test("a write keeps every digit: an upsert of row B updates row B; numeric and jsonb exact", async () => {
  const body = `{"query":{"relation":"big_ids","select":["id","note","amount","doc"],` +
    `"write_mode":"upsert"},"data":[{"id":${B},"note":"updated B",` +
    `"amount":1.23456789012345678901,"doc":{"n":12345678901234567890123}}]}`;
  const res = await fetch(`${srv.url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  const answer = await res.text();
  assert.equal(res.status, 200, answer);
  // The answer's numbers are PostgreSQL's text: every digit there too.
  assert.match(answer, /"id":9007199254740993/);
  assert.match(answer, /"amount":1\.23456789012345678901/);
  const rows = await sql<{ id: string; note: string; amount: string; doc: string }>`
    select id::text, note, amount::text, doc::text from big_ids order by id`;
  assert.deepEqual(rows.map((r) => [r.id, r.note, r.amount, r.doc]), [
    ["9007199254740992", "row A", "0.00000000000000000000", null],
    [B, "updated B", "1.23456789012345678901", '{"n": 12345678901234567890123}'],
  ]);
});

Deno.test("an integer beyond bigint's range is svc's 400; an exact literal computes exactly", async () => {
  const res = await fetch(`${srv.url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: `{"query":{"relation":"big_ids","select":["id"]},"data":[{"id":9223372036854775808}]}`,
  });
  const body = await res.json();
  assert.equal(res.status, 400, JSON.stringify(body));
  assert.equal(body.code, "QUERY_INVALID");
  assert.match(body.message, /got the number 9223372036854775808/);
  // An integer written with a fraction of zeros or an exponent is that integer.
  const spelled = await fetch(`${srv.url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: `{"query":{"relation":"big_ids","select":["id"]},"data":[{"id":9007199254740995.0},` +
      `{"id":9.007199254740997e15}],"returns":"none","stats":true}`,
  });
  assert.equal(spelled.status, 200, await spelled.clone().text());
  await spelled.body?.cancel();
  const ids = await sql<
    { id: string }
  >`select id::text from big_ids where id > 9007199254740994 order by id`;
  assert.deepEqual(ids.map((r) => r.id), ["9007199254740995", "9007199254740997"]);
  const sum = await fetch(`${srv.url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body:
      `{"relation":"big_ids","select":{"x":["+",0,12345678901234567890123]},"limit":1,"order_by":["id"]}`,
  });
  assert.equal(await sum.text(), '[{"x":12345678901234567890123}]');
  // Short numbers stay plain numbers (no change for every usual body).
  const small = await postSvc(srv, {
    relation: "big_ids",
    select: ["note"],
    where: ["=", "id", 1],
  });
  assert.deepEqual(small.body, []);
});

Deno.test({
  name: "exact numbers: stop",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    await srv.stop();
    await sql.end();
    await stopDb();
    await Deno.remove(wellknown, { recursive: true });
  },
});
