/**
 * GET and POST /svc take a direct path past Hono (src/http/server.ts). The same requests sent to
 * `/sv%63` (Hono decodes it to /svc and routes it through its middleware chain) must get the
 * same status, headers and body: CORS, nosniff, request id, session cookie, errors.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { isSvcUrl } from "../../src/http/server.ts";
import { startServer } from "../helpers/server.ts";

const uri = await chinookDb();
const srv = await startServer(uri, ["--http.cors.allowed_origins=https://app.example"]);

/** Status, headers (minus Date) and body of a response. */
async function snapshot(res: Response) {
  const headers = [...res.headers].filter(([k]) => k !== "date");
  return { status: res.status, headers, body: await res.text() };
}

const JSON_TYPE = { "content-type": "application/json" };
const cases: [string, string, RequestInit][] = [
  ["read", "", {
    method: "POST",
    headers: { ...JSON_TYPE, origin: "https://app.example", "x-request-id": "d-1" },
    body: JSON.stringify({ relation: "genre", limit: 2 }),
  }],
  ["read again (cached)", "", {
    method: "POST",
    headers: { ...JSON_TYPE, "x-request-id": "d-2" },
    body: JSON.stringify({ relation: "genre", limit: 2 }),
  }],
  ["GET form", "?relation=genre&limit=1", { headers: { "x-request-id": "d-3" } }],
  ["bad query", "", {
    method: "POST",
    headers: { ...JSON_TYPE, origin: "https://evil.example", "x-request-id": "d-4" },
    body: JSON.stringify({ relation: "no_such_table" }),
  }],
  ["not JSON", "", {
    method: "POST",
    headers: { "content-type": "text/plain", "x-request-id": "d-5" },
    body: "{}",
  }],
  ["bad session cookie", "", {
    method: "POST",
    headers: { ...JSON_TYPE, cookie: "accesstoken=not.a.token", "x-request-id": "d-6" },
    body: JSON.stringify({ relation: "genre", limit: 1 }),
  }],
];

Deno.test("direct /svc path: same answer as through Hono", async () => {
  for (const [name, query, init] of cases) {
    const direct = await snapshot(await fetch(`${srv.url}/svc${query}`, init));
    const hono = await snapshot(await fetch(`${srv.url}/sv%63${query}`, init));
    assert.deepEqual(direct, hono, name);
    assert.ok(direct.headers.some(([k, v]) => k === "x-content-type-options" && v === "nosniff"));
    assert.ok(direct.headers.some(([k]) => k === "x-request-id"), name);
  }
  const read = await fetch(`${srv.url}/svc`, cases[0][2]);
  assert.equal(read.status, 200);
  assert.equal(read.headers.get("access-control-allow-origin"), "https://app.example");
  assert.equal(read.headers.get("x-request-id"), "d-1");
  assert.equal((await read.json()).length, 2);
  const bad = await fetch(`${srv.url}/svc`, cases[5][2]);
  assert.match(bad.headers.get("set-cookie") ?? "", /^accesstoken=; Max-Age=0/);
  await bad.body?.cancel();
  // A generated request id when none is sent.
  const gen = await srv.post("/svc", { relation: "genre", limit: 1 });
  assert.match(gen.headers.get("x-request-id") ?? "", /^[0-9a-f-]{36}$/);
  await gen.body?.cancel();
});

Deno.test("direct /svc path: only the exact path", () => {
  assert.equal(isSvcUrl("http://127.0.0.1:8080/svc"), true);
  assert.equal(isSvcUrl("http://127.0.0.1:8080/svc?relation=genre"), true);
  assert.equal(isSvcUrl("https://h/svc"), true);
  for (
    const u of [
      "http://h/svc/",
      "http://h/svcx",
      "http://h/svc/health",
      "http://h/",
      "http://h/sv%63",
    ]
  ) {
    assert.equal(isSvcUrl(u), false, u);
  }
});

Deno.test({
  name: "direct /svc path: teardown",
  async fn() {
    await srv.stop();
    await stopDb();
  },
});
