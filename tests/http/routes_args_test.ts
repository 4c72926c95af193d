/**
 * Simple-route argument binding through real HTTP: VARIADIC functions (declared in a comment or in
 * configuration) called with `VARIADIC "xs" => …`, and a repeated query-string or form key: an
 * array for an array argument, else 400 QUERY_INVALID naming the argument (never svc's own SQL).
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
  create function ra.note(a int, b text default 'none') returns jsonb volatile language sql
    as $$ select jsonb_build_object('a', a, 'b', b) $$;
  comment on function ra.note(int, text) is 'route:: path: /note';
  create function ra.vgap(a int default 1, b int default 2, variadic xs int[] default '{}')
    returns int immutable language sql as $$ select a * 100 + b * 10 + cardinality(xs) $$;
  comment on function ra.vgap(int, int, int[]) is 'route:: path: /vgap';
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
const form = (path: string, body: string) =>
  answer(fetch(srv.url + path, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body,
  }));

function ok(a: Answer, body: unknown): void {
  assert.equal(a.status, 200, JSON.stringify(a.body));
  assert.deepEqual(a.body, body);
}

/** 400 QUERY_INVALID whose message names `argument` and leaks none of svc's SQL. */
function refused(a: Answer, argument: string): void {
  assert.equal(a.status, 400, JSON.stringify(a.body));
  assert.equal(a.code, "QUERY_INVALID", JSON.stringify(a.body));
  assert.match(a.body.message, new RegExp(`"${argument}"`));
  assert.doesNotMatch(a.body.message, /populate|select|\$\d/);
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

Deno.test("variadic simple route: arguments left to their defaults", async () => {
  ok(await get("/vjoin/+"), "none");
  ok(await get("/vgap?a=3&b=5"), 350);
  ok(await get("/vgap?a=3"), 320);
  ok(await get("/vgap"), 120);
  ok(await get("/vgap?a=4&b=5&xs=1&xs=1"), 452);
  ok(await get("/vgap?a=4&b=5&xs=%7B1%7D"), 451);
  for (const path of ["/vgap?b=5", "/vgap?b=5&xs=1"]) {
    const gap = await get(path);
    assert.equal(gap.status, 400, JSON.stringify(gap.body));
    assert.equal(gap.code, "QUERY_INVALID");
    assert.match(gap.body.message, /vgap.*VARIADIC.*"a"/);
  }
});

Deno.test("repeated query-string key: 400 naming a one-value argument", async () => {
  ok(await get("/echo/1?b=x"), { a: 1, b: "x" });
  refused(await get("/echo/1?b=x&b=y"), "b");
  // Even a key repeated with the same value, and for a jsonb argument.
  refused(await get("/echo/1?b=x&b=x"), "b");
  refused(await get("/tagged/1?j=1&j=2"), "j");
  // The path param wins over the query string, repeated or not; unknown repeated keys are ignored.
  ok(await get("/echo/1?a=5&a=6&z=1&z=2"), { a: 1, b: "none" });
});

Deno.test("repeated query-string key: an array argument takes every value", async () => {
  ok(await get("/tagged/1?t=x&t=y&n=1&n=2"), { a: 1, t: ["x", "y"], n: [1, 2], j: null });
  ok(await get("/tagged/1?t=%7Bx,y%7D"), { a: 1, t: ["x", "y"], n: [], j: null });
});

Deno.test("body: an array for a one-value argument is 400 naming it", async () => {
  ok(await form("/note", "a=1&b=x"), { a: 1, b: "x" });
  refused(await form("/note", "a=1&b=x&b=y"), "b");
  refused(await post("/note", { a: 1, b: ["x"] }), "b");
  refused(await post("/note", { a: [1, 2] }), "a");
  ok(await form("/tagged/2", "t=x&t=y"), { a: 2, t: ["x", "y"], n: [], j: null });
  ok(await post("/tagged/2", { j: [1, 2] }), { a: 2, t: [], n: [], j: [1, 2] });
  ok(await form("/tagged/2", "j=1&j=2"), { a: 2, t: [], n: [], j: ["1", "2"] });
});

Deno.test("body: an object for an argument that takes no row is 400, svc's SQL not shown", async () => {
  for (const body of [{ a: 1, b: { x: 1 } }, { a: { n: 1 } }]) {
    const a = await post("/note", body);
    assert.equal(a.status, 400, JSON.stringify(a.body));
    assert.equal(a.code, "QUERY_INVALID", JSON.stringify(a.body));
    assert.match(a.body.message, /not a row \(composite\) type/);
    assert.doesNotMatch(a.body.message, /populate|select|\$\d/);
  }
});

Deno.test("stop", async () => {
  await srv.stop();
  await stopDb();
});
