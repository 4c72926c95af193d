/**
 * Simple-route argument binding through real HTTP: VARIADIC functions (declared in a comment or in
 * configuration) called with `VARIADIC "xs" => …`.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

const uri = await chinookDb(
  "routes_args",
  `
  create schema ra;
  grant usage on schema ra to "~anonymous";
  create function ra.vecho(variadic xs text[]) returns text[] immutable language sql
    as $$ select xs $$;
  comment on function ra.vecho(text[]) is 'route:: path: /vecho';
  create function ra.vsum(variadic xs int[]) returns int immutable language sql
    as $$ select sum(x)::int from unnest(xs) x $$;
  create function ra.vjoin(sep text, variadic parts text[] default '{none}') returns text
    volatile language sql as $$ select array_to_string(parts, sep) $$;
  comment on function ra.vjoin(text, text[]) is 'route:: path: /vjoin/{sep}, method: GET, POST';
  create function ra.echo(a int, b text default 'none') returns jsonb immutable language sql
    as $$ select jsonb_build_object('a', a, 'b', b) $$;
  comment on function ra.echo(int, text) is 'route:: path: /echo/{a}';
  create function ra.tagged(a int, t text[] default '{}', n int[] default '{}',
    j jsonb default null) returns jsonb volatile language sql
    as $$ select jsonb_build_object('a', a, 't', t, 'n', n, 'j', j) $$;
  comment on function ra.tagged(int, text[], int[], jsonb) is
    'route:: path: /tagged/{a}, method: GET, POST';
  grant execute on all functions in schema ra to "~anonymous";
`,
);
const srv = await startServer(uri, ["--route.ra.vsum.path=/vsum"]);

interface Answer {
  status: number;
  code: string | null;
  // deno-lint-ignore no-explicit-any
  body: any;
}

async function answer(res: Response | Promise<Response>): Promise<Answer> {
  const r = await res;
  const text = await r.text();
  return {
    status: r.status,
    code: r.headers.get("x-svc-errorcode"),
    body: text && JSON.parse(text),
  };
}

const get = (path: string) => answer(srv.get(path));
const post = (path: string, body: unknown) => answer(srv.post(path, body));
function ok(a: Answer, body: unknown): void {
  assert.equal(a.status, 200, JSON.stringify(a.body));
  assert.deepEqual(a.body, body);
}

Deno.test("variadic simple route (comment): array literal or repeated key", async () => {
  ok(await get("/vecho?xs=%7Ba,b%7D"), ["a", "b"]);
  ok(await get("/vecho?xs=a&xs=b&xs=c"), ["a", "b", "c"]);
  ok(await post("/vjoin/-", { parts: ["x", "y"] }), "x-y");
  ok(await get("/vjoin/+?parts=p&parts=q"), "p+q");
  const missing = await get("/vecho");
  assert.equal(missing.status, 400);
  assert.equal(missing.code, "QUERY_INVALID");
  assert.match(missing.body.message, /"xs"/);
});

Deno.test("variadic simple route (configuration)", async () => {
  ok(await get("/vsum?xs=%7B1,2,3%7D"), 6);
  ok(await get("/vsum?xs=4&xs=5"), 9);
  // An element PostgreSQL cannot cast: a 400 of its own, not svc's SQL.
  const bad = await get("/vsum?xs=1&xs=x");
  assert.equal(bad.status, 400, JSON.stringify(bad.body));
  assert.equal(bad.code, "PG_22P02");
});

Deno.test("stop", async () => {
  await srv.stop();
  await stopDb();
});
