/** Exact JSON numbers (src/formats/json.ts): only a number a double cannot hold is kept as text. */
import assert from "node:assert/strict";
import {
  exactNumber,
  integerOf,
  isExactNumber,
  parseJsonExact,
  plainDecimal,
} from "../../src/formats/json.ts";

Deno.test("numbers a double holds stay numbers; the others keep their text", () => {
  const v = parseJsonExact(
    '{"a":9007199254740993,"b":9007199254740992,"c":0.1,"d":1.50,"e":-0,"f":1e400,' +
      '"g":1.23456789012345678901,"h":"12345678901234567890","i":[12345678901234567890123],' +
      '"j":1e20,"k":0.30000000000000004}',
  ) as Record<string, unknown>;
  const text = (x: unknown) => isExactNumber(x) ? x.rawJSON : x;
  assert.equal(text(v.a), "9007199254740993");
  assert.equal(v.b, 9007199254740992);
  assert.equal(v.c, 0.1);
  assert.equal(v.d, 1.5);
  assert.ok(Object.is(v.e, -0));
  assert.equal(text(v.f), "1e400");
  assert.equal(text(v.g), "1.23456789012345678901");
  assert.equal(v.h, "12345678901234567890", "a string of digits is a string");
  assert.equal(text((v.i as unknown[])[0]), "12345678901234567890123");
  assert.equal(v.j, 1e20);
  assert.equal(v.k, 0.30000000000000004);
  // JSON.stringify writes them back verbatim.
  assert.equal(JSON.stringify(v.a), "9007199254740993");
  assert.equal(JSON.stringify({ x: v.g }), '{"x":1.23456789012345678901}');
});

Deno.test("a body without 16 digits in a row is JSON.parse's answer", () => {
  const text = '{"relation":"artist","where":["=","artist_id",123456789012345]}';
  assert.deepEqual(parseJsonExact(text), JSON.parse(text));
});

Deno.test("exactNumber: numeric text of the GET form, leading zeros allowed", () => {
  assert.equal(exactNumber("42"), 42);
  assert.equal(exactNumber("007"), 7);
  const big = exactNumber("0009007199254740993");
  assert.ok(isExactNumber(big) && big.rawJSON === "9007199254740993");
  assert.ok(isExactNumber(exactNumber("-9007199254740993")));
});

Deno.test("a number of two million digits parses at once, whatever its zeros (no backtracking)", async () => {
  // Found by a probe: trailing zeros were stripped by a regular expression whose backtracking is
  // quadratic in a run of inner zeros: a 200 KB `1000…0001` took 26 s of one worker, a 10 MB one
  // hours. Run in a process of its own, given a minute (it takes milliseconds): a hang guard.
  const code = `
    import { parseJsonExact, exactNumber } from ${
    JSON.stringify(new URL("../../src/formats/json.ts", import.meta.url).href)
  };
    const n = "1" + "0".repeat(2_000_000) + "1";
    const v = parseJsonExact('{"x":' + n + '}');
    if (v.x.rawJSON !== n || exactNumber(n).rawJSON !== n) throw new Error("not exact");
    parseJsonExact('{"x":0.' + "0".repeat(2_000_000) + '1}');
  `;
  const child = new Deno.Command(Deno.execPath(), {
    args: ["eval", code],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  const out = await child.output();
  clearTimeout(timer);
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
});

Deno.test("integerOf and plainDecimal read a numeric text exactly, without blowing up exponents", () => {
  assert.equal(integerOf("9007199254740993"), 9007199254740993n);
  assert.equal(integerOf("9007199254740993.0"), 9007199254740993n);
  assert.equal(integerOf("9.007199254740993e15"), 9007199254740993n);
  assert.equal(integerOf("-0.0"), 0n);
  assert.equal(integerOf("1.5"), null);
  assert.equal(integerOf("1e100000000"), null, "beyond 40 digits: no 100-million-digit string");
  assert.equal(plainDecimal("1.23456789012345678901e3"), "1234.56789012345678901");
  assert.equal(plainDecimal("1.5e-20"), "0.000000000000000000015");
  assert.equal(plainDecimal("-12e2"), "-1200");
  assert.equal(plainDecimal("1e100000000"), "1e100000000", "kept as written past 1000 characters");
});

Deno.test("a value nested deeper than a reviver's stack is parsed without it (the depth limit names it)", async () => {
  const { parseJson } = await import("../../src/request/body.ts");
  const deep = "[".repeat(500_000) + "12345678901234567890" + "]".repeat(500_000);
  assert.throws(() => parseJson(deep, 64), /nested deeper than 64 levels/);
});
