/**
 * VARIADIC functions through `/svc`: named (`VARIADIC "xs" => …`, PostgreSQL's order), positional,
 * the GET form, in a batch, with a default, polymorphic, and not as a computed field. Every way
 * answers 200 with the right value or a clear 4xx, never 500.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { postSvc, startServer } from "../helpers/server.ts";

const uri = await chinookDb(
  "variadic_calls",
  `
  create function vsum(variadic xs int[]) returns int language sql immutable
    as 'select sum(x)::int from unnest(xs) x';
  create function vcat(sep text, variadic parts text[]) returns text language sql immutable
    as 'select array_to_string(parts, sep)';
  create function vdef(variadic xs int[] default '{7}') returns int language sql immutable
    as 'select sum(x)::int from unnest(xs) x';
  create function vlen(variadic xs anyarray) returns int language sql immutable
    as 'select cardinality(xs)';
  create function vartists(variadic ids int[]) returns setof artist language sql stable
    as 'select * from artist where artist_id = any(ids)';
  create function vtitles(variadic a album[]) returns text language sql stable
    as 'select string_agg(x.title, '','') from unnest(a) x';
  create function vtail(sep text, variadic parts text[] default '{none}') returns text
    language sql immutable as 'select array_to_string(parts, sep)';
  create function vgap(a int default 1, b int default 2, variadic xs int[] default '{}')
    returns int language sql immutable as 'select a * 100 + b * 10 + cardinality(xs)';
  grant execute on all functions in schema public to "~anonymous";
`,
);
const srv = await startServer(uri, []);

const post = (body: unknown) => postSvc(srv, body);

async function get(query: string): Promise<{ status: number; code: string | null; body: unknown }> {
  const res = await srv.get(`/svc?${query}`);
  const text = await res.text();
  return { status: res.status, code: res.headers.get("x-svc-errorcode"), body: JSON.parse(text) };
}

Deno.test("variadic, named arguments: VARIADIC precedes the name", async () => {
  const r = await post({ function: "vsum", arguments: { xs: ["arr", 1, 2, 3] } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, [{ vsum: 6 }]);
  // An array literal string meets the argument's type.
  const lit = await post({ function: "vsum", arguments: { xs: ["{4,5}"] } });
  assert.equal(lit.status, 200, JSON.stringify(lit.body));
  assert.deepEqual(lit.body, [{ vsum: 9 }]);
  // A variadic after an ordinary argument, both named, in either order.
  const cat = await post({
    function: "vcat",
    arguments: { parts: ["arr", ["a"], ["b"], ["c"]], sep: ["-"] },
  });
  assert.equal(cat.status, 200, JSON.stringify(cat.body));
  assert.deepEqual(cat.body, [{ vcat: "a-b-c" }]);
});

Deno.test("variadic, positional arguments", async () => {
  const r = await post({ function: "vsum", arguments: [["arr", 1, 2]] });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, [{ vsum: 3 }]);
  const cat = await post({ function: "vcat", arguments: [["/"], ["arr", ["x"], ["y"]]] });
  assert.equal(cat.status, 200, JSON.stringify(cat.body));
  assert.deepEqual(cat.body, [{ vcat: "x/y" }]);
});

Deno.test("variadic, GET form", async () => {
  const r = await get("function=vsum&arguments.xs=%7B1,2%7D");
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, [{ vsum: 3 }]);
  const cat = await get("function=vcat&arguments.sep=%27%2B%27&arguments.parts=%27%7Bp,q%7D%27");
  assert.equal(cat.status, 200, JSON.stringify(cat.body));
  assert.deepEqual(cat.body, [{ vcat: "p+q" }]);
});

Deno.test("variadic in a batch, and a set-returning one filtered", async () => {
  const r = await post([
    { function: "vsum", arguments: { xs: ["arr", 10, 20] } },
    { function: "vsum", arguments: [["arr", 1]] },
    {
      function: "vartists",
      arguments: { ids: ["arr", 1, 2, 3] },
      select: ["name"],
      where: ["<>", "artist_id", 2],
      order_by: ["artist_id"],
    },
  ]);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, [
    [{ vsum: 30 }],
    [{ vsum: 1 }],
    [{ name: "AC/DC" }, { name: "Aerosmith" }],
  ]);
});

Deno.test("variadic with a default, and a polymorphic one", async () => {
  assert.deepEqual((await post({ function: "vdef" })).body, [{ vdef: 7 }]);
  const named = await post({ function: "vdef", arguments: { xs: ["arr", 1, 1] } });
  assert.equal(named.status, 200, JSON.stringify(named.body));
  assert.deepEqual(named.body, [{ vdef: 2 }]);
  const poly = await post({ function: "vlen", arguments: { xs: ["arr", 1, 2, 3] } });
  assert.equal(poly.status, 200, JSON.stringify(poly.body));
  assert.deepEqual(poly.body, [{ vlen: 3 }]);
  const polyPos = await post({ function: "vlen", arguments: [["arr", ["a"], ["b"]]] });
  assert.equal(polyPos.status, 200, JSON.stringify(polyPos.body));
  assert.deepEqual(polyPos.body, [{ vlen: 2 }]);
});

Deno.test("variadic with arguments left to their defaults: named ones go by position", async () => {
  // PostgreSQL matches a named call of a variadic function only with `VARIADIC "xs" => …`.
  const r = await post({ function: "vtail", arguments: { sep: ["+"] } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, [{ vtail: "none" }]);
  const g = await get("function=vtail&arguments.sep=%27%2B%27");
  assert.equal(g.status, 200, JSON.stringify(g.body));
  assert.deepEqual(g.body, [{ vtail: "none" }]);
  const lead = await post({ function: "vgap", arguments: { b: 5, a: 3 } });
  assert.equal(lead.status, 200, JSON.stringify(lead.body));
  assert.deepEqual(lead.body, [{ vgap: 350 }]);
  assert.deepEqual((await post({ function: "vgap", arguments: {} })).body, [{ vgap: 120 }]);
  const all = await post({ function: "vgap", arguments: { xs: ["arr", 1, 1], b: 5, a: 4 } });
  assert.equal(all.status, 200, JSON.stringify(all.body));
  assert.deepEqual(all.body, [{ vgap: 452 }]);
  // A gap before the last named argument cannot go by position: 400 saying what to give.
  const gap = await post({ function: "vgap", arguments: { b: 5 } });
  assert.equal(gap.status, 400, JSON.stringify(gap.body));
  assert.equal(gap.code, "QUERY_INVALID");
  assert.equal(gap.body.details.pointer, "/arguments");
  assert.match(gap.body.message, /vgap.*VARIADIC.*"a"/);
  const gap2 = await post({ function: "vgap", arguments: { b: 5, xs: ["arr", 1] } });
  assert.equal(gap2.status, 400, JSON.stringify(gap2.body));
  assert.match(gap2.body.message, /"a"/);
});

Deno.test("variadic: a value that is not an array is a clear 4xx, never 500", async () => {
  for (
    const r of [
      await post({ function: "vsum", arguments: { xs: 5 } }),
      await post({ function: "vsum", arguments: [5] }),
      await post({ function: "vsum", arguments: { xs: ["nope"] } }),
      await get("function=vsum&arguments.xs=5"),
      // A polymorphic variadic needs a typed array: a bare literal has no type to resolve.
      await get("function=vlen&arguments.xs=%7B1,2%7D"),
    ]
  ) {
    assert.ok(r.status >= 400 && r.status < 500, `${r.status} ${JSON.stringify(r.body)}`);
  }
});

Deno.test("variadic of a row type is not a computed field; it is called as a function", async () => {
  const r = await post({ relation: "album", select: ["vtitles"], limit: 1 });
  assert.equal(r.status, 400, JSON.stringify(r.body));
  assert.equal(r.code, "QUERY_UNKNOWN_COLUMN");
  const rows = await post({ function: "vtitles", arguments: { a: ['{"(1,x,1)","(2,y,1)"}'] } });
  assert.equal(rows.status, 200, JSON.stringify(rows.body));
  assert.deepEqual(rows.body, [{ vtitles: "x,y" }]);
});

Deno.test("stop", async () => {
  await srv.stop();
  await stopDb();
});
