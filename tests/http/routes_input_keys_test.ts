/**
 * A route's input collections (`req.query`, a urlencoded or multipart `req.body`, `req.headers`,
 * `req.cookies`) keep every key a client sends as a plain key: names of Object.prototype members
 * (`toString`, `constructor`, `valueOf`, `hasOwnProperty`) are not taken for an earlier value, and
 * `__proto__` is a key like any other (through real HTTP, the full-control `rt.echo` route of
 * tests/fixtures/routes.sql).
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/routes.sql", import.meta.url));
const uri = await chinookDb("routes_input_keys", fixture);
const srv = await startServer(uri);

/** The keys a client sends: each once, `__proto__` and `constructor` twice. */
const PAIRS: [string, string][] = [
  ["toString", "1"],
  ["constructor", "c"],
  ["valueOf", "v"],
  ["hasOwnProperty", "h"],
  ["__proto__", "p"],
  ["__proto__", "q"],
  ["constructor", "d"],
  ["plain", "x"],
];

/** What `req.query` / `req.body` must hold, as sorted [key, value] pairs. */
const EXPECTED: [string, unknown][] = [
  ["__proto__", ["p", "q"]],
  ["constructor", ["c", "d"]],
  ["hasOwnProperty", "h"],
  ["plain", "x"],
  ["toString", "1"],
  ["valueOf", "v"],
];

/** The echoed `req`, each member of it an own-keys object read from the JSON text. */
async function echoed(res: Response): Promise<Record<string, unknown>> {
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return JSON.parse(text);
}

/** The own entries of a value parsed from JSON (JSON.parse makes `__proto__` an own key). */
function entries(v: unknown): [string, unknown][] {
  assert.ok(v !== null && typeof v === "object", JSON.stringify(v));
  return Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]]);
}

Deno.test("req.query: Object.prototype names and __proto__ are plain keys", async () => {
  const res = await srv.get(`/echo/1?${new URLSearchParams(PAIRS)}`);
  const req = await echoed(res);
  assert.deepEqual(entries(req.query), EXPECTED);
});

Deno.test("req.body (urlencoded form): Object.prototype names and __proto__ are plain keys", async () => {
  const res = await fetch(srv.url + "/echo/f", {
    method: "PUT",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(PAIRS).toString(),
  });
  const req = await echoed(res);
  assert.deepEqual(entries(req.body), EXPECTED);
});

Deno.test("req.body (multipart): Object.prototype names and __proto__ are plain keys", async () => {
  const fd = new FormData();
  for (const [k, v] of PAIRS) fd.append(k, v);
  const res = await fetch(srv.url + "/echo/m", { method: "POST", body: fd });
  const req = await echoed(res);
  assert.deepEqual(entries(req.body), EXPECTED);
});

Deno.test("req.headers and req.cookies: __proto__ and toString are plain keys", async () => {
  const res = await fetch(srv.url + "/echo/h", {
    // Pairs, not an object literal: `"__proto__": …` in one would set its prototype.
    headers: [["__proto__", "hp"], ["toString", "ht"], ["cookie", "__proto__=cp; toString=ct"]],
  });
  const req = await echoed(res);
  const headers = req.headers as Record<string, unknown>;
  assert.ok(Object.hasOwn(headers, "__proto__"), JSON.stringify(headers));
  assert.equal(headers["__proto__"], "hp");
  assert.equal(headers["tostring"], "ht");
  assert.deepEqual(entries(req.cookies), [["__proto__", "cp"], ["toString", "ct"]]);
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
