import assert from "node:assert/strict";
import { HumlError, parse } from "../../src/formats/huml.ts";

// The official data from shared/ beside the checkout; a vendored copy (same commit) otherwise.
const SHARED = new URL("../../../shared/conformance/huml/", import.meta.url);
const VENDORED = new URL("../fixtures/huml/", import.meta.url);
const DATA = (() => {
  try {
    Deno.statSync(new URL("assertions/mixed.json", SHARED));
    return SHARED;
  } catch {
    return VENDORED;
  }
})();

interface AssertionCase {
  name: string;
  input: string;
  error: boolean;
}

function readJson(path: string): unknown {
  return JSON.parse(Deno.readTextFileSync(new URL(path, DATA)));
}

function assertHumlError(input: string, line: number, column: number): HumlError {
  try {
    parse(input);
  } catch (e) {
    assert.ok(e instanceof HumlError, `expected HumlError, got ${e}`);
    assert.deepEqual([e.line, e.column], [line, column], e.message);
    assert.ok(e.message.startsWith(`${line}:${column}`), e.message);
    return e;
  }
  assert.fail(`expected ${JSON.stringify(input)} to throw`);
}

Deno.test("huml conformance: assertions/mixed.json", async (t) => {
  const cases = readJson("assertions/mixed.json") as AssertionCase[];
  assert.ok(cases.length > 0);
  for (const [i, c] of cases.entries()) {
    await t.step(`${c.name} #${i}`, () => {
      if (c.error) {
        assert.throws(() => parse(c.input), HumlError);
      } else {
        parse(c.input);
      }
    });
  }
});

Deno.test("huml conformance: documents/mixed.huml", () => {
  const text = Deno.readTextFileSync(new URL("documents/mixed.huml", DATA));
  assert.deepStrictEqual(parse(text), readJson("documents/mixed.json"));
});

Deno.test("huml: scalars and roots", () => {
  assert.deepStrictEqual(parse("%HUML v0.2.0\n-0x1F"), -31);
  assert.deepStrictEqual(parse("- 1\n- -inf\n- nan"), [1, -Infinity, NaN]);
  assert.deepStrictEqual(parse('a: 1, "b c": "d\\te"'), { a: 1, "b c": "d\te" });
  assert.deepStrictEqual(parse('1, "x", null'), [1, "x", null]);
  assert.deepStrictEqual(parse("k: 1_000.5e1"), { k: 10005 });
  const proto = parse('"__proto__": 1') as Record<string, unknown>;
  assert.equal(Object.getPrototypeOf(proto), Object.prototype);
  assert.deepStrictEqual(Object.keys(proto), ["__proto__"]);
});

Deno.test("huml: multi-line strings", () => {
  const text = 'a::\n  s: """ # c\n    x  \n\n   y\n      \\n "q"\n  """\nb: 1';
  assert.deepStrictEqual(parse(text), { a: { s: 'x  \n\n   y\n  \\n "q"' }, b: 1 });
  assert.deepStrictEqual(parse('- """\n  one\n"""'), ["one"]);
});

Deno.test("huml: error line and column", () => {
  assertHumlError("a: 1\nb::\n  c: 1\n  c: 2", 4, 3);
  assertHumlError("key: value", 1, 6);
  assertHumlError('a: "é" ', 1, 7);
  assertHumlError("list:: 1 , 2", 1, 9);
  assertHumlError("d::\n  x: 1\n   y: 2", 3, 1);
  assertHumlError('k: "\\x"', 1, 5);
  assertHumlError('k: """\n  a\n   """', 3, 4);
  assertHumlError("k::\n", 2, 1);
  assertHumlError("", 1, 1);
  const e = assertHumlError("#nope", 1, 2);
  assert.match(e.message, /^1:2: /);
});
