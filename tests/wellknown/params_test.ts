import assert from "node:assert/strict";
import type { RelationNode } from "../../src/compile/ast.ts";
import { SvcError } from "../../src/svc_error.ts";
import {
  decodeGetParam,
  matchesType,
  PARAM_TYPES,
  type ParamDef,
  resolveParams,
  type WellKnown,
} from "../../src/wellknown/params.ts";

/** A well-known query with the given params (the node is not used by resolveParams). */
function wk(params: Record<string, ParamDef>): WellKnown {
  return { name: "q", file: "q.json", params, node: {} as RelationNode };
}

function req(type: string): ParamDef {
  return { type, required: true, default: undefined };
}

function throwsCode(fn: () => unknown, code: string, check?: (e: SvcError) => void): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof SvcError, `expected SvcError, got ${e}`);
    assert.equal(e.code, code, e.message);
    check?.(e);
    return true;
  });
}

Deno.test("decodeGetParam: JSON values are re-parsed", () => {
  assert.equal(decodeGetParam("123"), 123);
  assert.equal(decodeGetParam("-1.5"), -1.5);
  assert.equal(decodeGetParam("true"), true);
  assert.equal(decodeGetParam("false"), false);
  assert.equal(decodeGetParam("null"), null);
  assert.deepEqual(decodeGetParam("[1,2,3]"), [1, 2, 3]);
  assert.deepEqual(decodeGetParam('{"a":[1]}'), { a: [1] });
});

Deno.test("decodeGetParam: URL-encoded values as URLSearchParams decodes them", () => {
  const q = new URLSearchParams(
    "params.a=%22123%22&params.b=%5B1%2C%22x%22%5D&params.c=AC%2FDC&params.d=Rock+Roll",
  );
  assert.equal(decodeGetParam(q.get("params.a")!), "123");
  assert.deepEqual(decodeGetParam(q.get("params.b")!), [1, "x"]);
  assert.equal(decodeGetParam(q.get("params.c")!), "AC/DC");
  assert.equal(decodeGetParam(q.get("params.d")!), "Rock Roll");
});

Deno.test("decodeGetParam: anything else is the plain string", () => {
  assert.equal(decodeGetParam("Rock"), "Rock");
  assert.equal(decodeGetParam(""), "");
  assert.equal(decodeGetParam("2024-01-31"), "2024-01-31");
  assert.equal(
    decodeGetParam("550e8400-e29b-41d4-a716-446655440000"),
    "550e8400-e29b-41d4-a716-446655440000",
  );
  assert.equal(decodeGetParam("[1,"), "[1,");
  assert.equal(decodeGetParam("True"), "True");
  assert.equal(decodeGetParam("1e400"), "1e400");
  assert.equal(decodeGetParam("%22x%22"), "%22x%22", "no second percent-decoding");
});

Deno.test("param types: the supported list", () => {
  assert.deepEqual(
    [...PARAM_TYPES].sort(),
    [
      "any",
      "array",
      "boolean",
      "date",
      "integer",
      "number",
      "object",
      "string",
      "timestamp",
      "uuid",
    ],
  );
});

/** For each type: values it accepts and values it rejects, with the `got` reported. */
const CASES: Record<string, { ok: unknown[]; bad: [unknown, string][] }> = {
  string: {
    ok: ["", "x", "123"],
    bad: [[123, "integer"], [true, "boolean"], [["x"], "array"], [{}, "object"]],
  },
  integer: {
    ok: [0, -5, 2147483648],
    bad: [[1.5, "number"], ["1", "string"], [false, "boolean"], [[1], "array"]],
  },
  number: { ok: [0, 1.5, -2], bad: [["1.5", "string"], [true, "boolean"], [{ n: 1 }, "object"]] },
  boolean: { ok: [true, false], bad: [["true", "string"], [0, "integer"], [[true], "array"]] },
  object: { ok: [{}, { a: 1 }], bad: [[[], "array"], ["{}", "string"], [1, "integer"]] },
  array: { ok: [[], [1, "x"]], bad: [[{}, "object"], ["[]", "string"], [1, "integer"]] },
  uuid: {
    ok: ["550e8400-e29b-41d4-a716-446655440000", "550E8400-E29B-41D4-A716-446655440000"],
    bad: [["550e8400e29b41d4a716446655440000", "string"], ["nope", "string"], [123, "integer"]],
  },
  date: {
    ok: ["2024-01-31", "2024-02-29", "2000-02-29"],
    bad: [["2024-13-01", "string"], ["2023-02-29", "string"], ["2024-1-5", "string"], [
      "2024-01-31T00:00:00Z",
      "string",
    ], [20240131, "integer"]],
  },
  timestamp: {
    ok: [
      "2024-01-31T10:20:30Z",
      "2024-01-31T10:20:30.123+02:00",
      "2024-01-31T10:20",
      "2024-01-31 10:20:30",
      "2024-01-31T10:20:30-0500",
    ],
    bad: [["2024-01-31", "string"], ["2024-01-31T25:00:00Z", "string"], ["yesterday", "string"], [
      1706696430,
      "integer",
    ]],
  },
  any: { ok: [1, "x", null, [], {}, true], bad: [] },
};

for (const [type, { ok, bad }] of Object.entries(CASES)) {
  Deno.test(`param type ${type}: accepted and mismatched values`, () => {
    for (const v of ok) {
      assert.ok(matchesType(type, v), `${type} should accept ${JSON.stringify(v)}`);
      assert.deepEqual(resolveParams(wk({ p: req(type) }), { p: v }), { p: v });
    }
    for (const [v, got] of bad) {
      throwsCode(
        () => resolveParams(wk({ p: req(type) }), { p: v }),
        "WELL_KNOWN_PARAM_TYPE_MISMATCH",
        (e) => {
          assert.equal(e.status, 400);
          assert.deepEqual(e.details, { param: "p", expected: type, got });
          assert.match(e.message, new RegExp(`"p".*expected ${type}, got ${got}`));
        },
      );
    }
  });
}

Deno.test("params: required param omitted → WELL_KNOWN_PARAM_REQUIRED naming it", () => {
  const q = wk({
    artist_id: req("integer"),
    limit: { type: "integer", required: false, default: 10 },
  });
  for (const supplied of [undefined, null, {}, { limit: 5 }]) {
    throwsCode(() => resolveParams(q, supplied), "WELL_KNOWN_PARAM_REQUIRED", (e) => {
      assert.equal(e.status, 400);
      assert.match(e.message, /"artist_id"/);
      assert.deepEqual(e.details, { param: "artist_id", expected: "integer" });
    });
  }
});

Deno.test("params: defaults (value, null) applied when omitted; supplied values win", () => {
  const q = wk({
    limit: { type: "integer", required: false, default: 10 },
    genre: { type: "string", required: false, default: null },
    tags: { type: "array", required: false, default: ["a"] },
  });
  assert.deepEqual(resolveParams(q, {}), { limit: 10, genre: null, tags: ["a"] });
  assert.deepEqual(resolveParams(q, undefined), { limit: 10, genre: null, tags: ["a"] });
  assert.deepEqual(resolveParams(q, { limit: 3, genre: "Rock", tags: [] }), {
    limit: 3,
    genre: "Rock",
    tags: [],
  });
  // The default is copied: mutating a result does not change the definition.
  (resolveParams(q, {}).tags as string[]).push("b");
  assert.deepEqual(resolveParams(q, {}).tags, ["a"]);
});

Deno.test("params: explicit null is SQL NULL only where the default is null (or type any)", () => {
  const q = wk({
    genre: { type: "string", required: false, default: null },
    limit: { type: "integer", required: false, default: 10 },
    id: req("integer"),
    x: req("any"),
  });
  assert.deepEqual(resolveParams(q, { genre: null, id: 1, x: null }), {
    genre: null,
    limit: 10,
    id: 1,
    x: null,
  });
  throwsCode(
    () => resolveParams(q, { limit: null, id: 1, x: 1 }),
    "WELL_KNOWN_PARAM_TYPE_MISMATCH",
    (e) => {
      assert.deepEqual(e.details, { param: "limit", expected: "integer", got: "null" });
    },
  );
  throwsCode(() => resolveParams(q, { id: null, x: 1 }), "WELL_KNOWN_PARAM_TYPE_MISMATCH", (e) => {
    assert.deepEqual(e.details, { param: "id", expected: "integer", got: "null" });
  });
});

Deno.test("params: unknown supplied params → QUERY_INVALID naming them", () => {
  const q = wk({ id: req("integer") });
  throwsCode(() => resolveParams(q, { id: 1, foo: 2, bar: 3 }), "QUERY_INVALID", (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /"foo", "bar"/);
    assert.deepEqual((e.details as { params: string[] }).params, ["foo", "bar"]);
  });
  // Checked before required params: the caller learns about the typo first.
  throwsCode(
    () => resolveParams(q, { ID: 1 }),
    "QUERY_INVALID",
    (e) => assert.match(e.message, /"ID"/),
  );
  throwsCode(() => resolveParams(wk({}), { a: 1 }), "QUERY_INVALID");
  // The pointer of the {wellknown, params} object in the body prefixes details.pointer.
  throwsCode(
    () => resolveParams(wk({}), { a: 1 }, "/2/query"),
    "QUERY_INVALID",
    (e) => assert.deepEqual(e.details, { pointer: "/2/query/params", params: ["a"] }),
  );
  assert.deepEqual(resolveParams(wk({}), {}), {});
});

Deno.test("params: a non-object params value → QUERY_INVALID", () => {
  for (const v of [[1], "x", 3, true]) {
    throwsCode(() => resolveParams(wk({}), v), "QUERY_INVALID");
  }
});
