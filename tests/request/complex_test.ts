import assert from "node:assert/strict";
import { type ComplexQuery, parseBody } from "../../src/request/complex.ts";
import { SvcError } from "../../src/svc_error.ts";

function bodyFails(body: unknown, code: string, details: Record<string, unknown>) {
  try {
    parseBody(body);
  } catch (e) {
    assert.ok(e instanceof SvcError, String(e));
    assert.equal(e.code, code, `${JSON.stringify(body)}: ${e.message}`);
    assert.deepEqual(e.details, details);
    return;
  }
  assert.fail(`no error for ${JSON.stringify(body)}`);
}

const rel = { relation: "artist" };

Deno.test("bare Relation and {wellknown} bodies are ComplexQueries without flags", () => {
  assert.deepEqual(parseBody(rel), { kind: "single", query: { query: rel, complex: false } });
  const wk = { wellknown: "top", params: { n: 1 } };
  assert.deepEqual(parseBody(wk), { kind: "single", query: { query: wk, complex: false } });
});

Deno.test("wrappers: reads, writes, flags and the envelope switch", () => {
  assert.deepEqual(parseBody({ query: rel, data: [{ name: "x" }] }), {
    kind: "single",
    query: { query: rel, data: [{ name: "x" }], complex: false },
  });
  const q = (b: unknown): ComplexQuery => {
    const p = parseBody(b);
    assert.equal(p.kind, "single");
    return (p as { query: ComplexQuery }).query;
  };
  assert.equal(q({ query: rel, data: null }).data, null);
  assert.ok("data" in q({ query: rel, data: null }));
  assert.equal(q({ query: rel, rollback: true }).complex, false);
  assert.equal(q({ query: rel, returns: "results" }).complex, false);
  assert.equal(q({ query: rel, count: false }).complex, false);
  assert.equal(q({ query: rel, count: true }).complex, true);
  assert.equal(q({ query: rel, sql: true }).complex, true);
  assert.equal(q({ query: rel, query_plan: true }).complex, true);
  assert.equal(q({ query: rel, data: [], stats: true }).complex, true);
  assert.deepEqual(q({ query: rel, count: true, returns: "none", rollback: true }), {
    query: rel,
    count: true,
    returns: "none",
    rollback: true,
    complex: true,
  });
  assert.equal(q({ query: { wellknown: "w" }, data: [], stats: true, sql: true }).stats, true);
  assert.equal(q({ query: rel, stats: true, query_plan: false, data: [] }).complex, true);
});

Deno.test("ComplexQuery rule errors", () => {
  bodyFails({ query: rel, returns: "none" }, "QUERY_UNSUPPORTED_RETURNS", { pointer: "/returns" });
  bodyFails({ query: rel, returns: "none", rollback: true }, "QUERY_UNSUPPORTED_RETURNS", {
    pointer: "/returns",
  });
  bodyFails({ query: rel, data: [], count: true }, "QUERY_COUNT_IS_READ_ONLY", {
    pointer: "/count",
  });
  bodyFails({ query: rel, stats: true }, "QUERY_STATS_IS_WRITE_ONLY", { pointer: "/stats" });
  bodyFails(
    { query: rel, data: [], stats: true, query_plan: true },
    "QUERY_STATS_QUERY_PLAN_CONFLICT",
    {
      pointer: "/query_plan",
    },
  );
});

Deno.test("malformed bodies are QUERY_INVALID with pointers", () => {
  bodyFails(5, "QUERY_INVALID", { pointer: "" });
  bodyFails(null, "QUERY_INVALID", { pointer: "" });
  bodyFails([], "QUERY_INVALID", { pointer: "" });
  bodyFails({ data: [] }, "QUERY_INVALID", { pointer: "/data" });
  // The message shows the shape of a write (a relation given with 'data' beside it).
  assert.throws(
    () => parseBody({ relation: "artist", data: [{ name: "x" }] }),
    (e) => e instanceof SvcError && /\{"query": <Relation>, "data": \[rows\]\}/.test(e.message),
  );
  bodyFails({ query: rel, foo: 1 }, "QUERY_INVALID", { pointer: "/foo" });
  bodyFails({ query: 5 }, "QUERY_INVALID", { pointer: "/query" });
  bodyFails({ query: rel, count: "yes" }, "QUERY_INVALID", { pointer: "/count" });
  bodyFails({ query: rel, returns: "all" }, "QUERY_INVALID", { pointer: "/returns" });
  bodyFails({ wellknown: 5 }, "QUERY_INVALID", { pointer: "/wellknown" });
  bodyFails({ wellknown: "w", extra: 1 }, "QUERY_INVALID", { pointer: "/extra" });
  bodyFails({ query: { wellknown: "w", params: [] } }, "QUERY_INVALID", {
    pointer: "/query/params",
  });
});

Deno.test("batches: mixed items, errors carry the index", () => {
  const body = [rel, { wellknown: "w" }, { query: rel, data: [{}], stats: true }, {
    query: rel,
    count: true,
  }];
  const parsed = parseBody(body);
  assert.equal(parsed.kind, "batch");
  if (parsed.kind !== "batch") return;
  assert.deepEqual(parsed.items.map((i) => i.complex), [false, false, true, true]);
  assert.deepEqual(parsed.items[2].data, [{}]);
  bodyFails([rel, { query: rel, stats: true }], "QUERY_STATS_IS_WRITE_ONLY", {
    pointer: "/1/stats",
    index: 1,
  });
  bodyFails([rel, [rel]], "QUERY_INVALID", { pointer: "/1", index: 1 });
  bodyFails([rel, 7], "QUERY_INVALID", { pointer: "/1", index: 1 });
});
