/**
 * X-Request-Id (docs/operations.md), the structured access log and /svc/metrics: the id is echoed
 * or generated, reaches the database as `svc.request_id` on every execution path, and appears on
 * the access line with the path kind, status, duration and role; a scrape after a mixed load
 * counts exactly the requests sent.
 */
import assert from "node:assert/strict";
import { configureSync, type LogRecord, resetSync } from "@logtape/logtape";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const uri = await chinookDb(
  "access",
  `
  create function rid() returns text language sql stable as
    $$ select current_setting('svc.request_id', true) $$;
  create view rid_view as select current_setting('svc.request_id', true) as id
    from generate_series(1, 3);
  create function boom() returns int language sql volatile as $$ select 1 / 0 $$;
  grant execute on function rid(), boom() to "~anonymous";
  grant select on rid_view to "~anonymous";
`,
);
const srv = await startServer(uri, ["--http.metrics.enable=true"]);

// Capture the access log (the server configured logging at start; replace its sink).
const records: LogRecord[] = [];
resetSync();
configureSync({
  sinks: { mem: (r: LogRecord) => void records.push(r) },
  loggers: [
    { category: ["svc"], lowestLevel: "info", sinks: ["mem"] },
    { category: ["logtape", "meta"], lowestLevel: "error", sinks: ["mem"] },
  ],
});
const accessLine = (id: string) =>
  records.find((r) => r.properties.request_id === id && "kind" in r.properties);

Deno.test("a usable X-Request-Id is echoed and set as svc.request_id on every path", async () => {
  const cases: [string, () => Promise<Response>][] = [
    ["fn-1", () => srv.post("/svc", { function: "rid" }, { "x-request-id": "fn-1" })],
    [
      "small-2",
      () => srv.post("/svc", { relation: "rid_view", limit: 1 }, { "x-request-id": "small-2" }),
    ],
    ["cursor-3", () => srv.post("/svc", { relation: "rid_view" }, { "x-request-id": "cursor-3" })],
    ["get-4", () => srv.get("/svc?relation=rid_view", { "x-request-id": "get-4" })],
  ];
  for (const [id, send] of cases) {
    const res = await send();
    assert.equal(res.status, 200, id);
    assert.equal(res.headers.get("x-request-id"), id);
    const body = await res.json();
    const seen = body.map((r: { id?: string; rid?: string }) => r.id ?? r.rid);
    assert.ok(seen.length > 0 && seen.every((v: string) => v === id), `${id}: ${seen}`);
  }
});

Deno.test("an unusable or missing X-Request-Id is replaced by a generated one", async () => {
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  for (const header of [undefined, "x".repeat(129), "has space", "tab\there", "é"]) {
    const headers: Record<string, string> = header === undefined ? {} : { "x-request-id": header };
    const res = await fetch(srv.url + "/svc", {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify({ function: "rid" }),
    }).catch(() => null);
    if (!res) continue; // a header value fetch itself refuses to send
    const id = res.headers.get("x-request-id")!;
    assert.match(id, uuid);
    assert.notEqual(id, header);
    assert.deepEqual(await res.json(), [{ rid: id }]);
  }
  const max = "!~".repeat(64);
  const res = await srv.post("/svc", { function: "rid" }, { "x-request-id": max });
  assert.equal(res.headers.get("x-request-id"), max);
  assert.deepEqual(await res.json(), [{ rid: max }]);
});

Deno.test("the access line carries method, path kind, status sent, duration, role, request id", async () => {
  const tok = await token({ role: "~anonymous", iat: now(), exp: now() + 600 });
  const sends: [string, Promise<Response>, Record<string, unknown>][] = [
    ["log-svc", srv.post("/svc", { relation: "genre", limit: 1 }, { "x-request-id": "log-svc" }), {
      method: "POST",
      kind: "svc",
      status: 200,
    }],
    ["log-get", srv.get("/svc?relation=genre&limit=1", { "x-request-id": "log-get" }), {
      method: "GET",
      kind: "svc_get",
      status: 200,
    }],
    ["log-bad", srv.post("/svc", { relation: "nope" }, { "x-request-id": "log-bad" }), {
      kind: "svc",
      status: 404,
    }],
    ["log-db", srv.post("/svc", { function: "boom" }, { "x-request-id": "log-db" }), {
      kind: "svc",
      status: 400,
    }],
    ["log-health", srv.get("/svc/health/live", { "x-request-id": "log-health" }), {
      kind: "health",
      status: 200,
    }],
    ["log-json", srv.get("/svc/database.json", { "x-request-id": "log-json" }), {
      kind: "database_json",
      status: 200,
    }],
    ["log-auth", srv.get("/auth/nowhere", { "x-request-id": "log-auth" }), {
      kind: "auth",
      status: 404,
    }],
    ["log-other", srv.get("/elsewhere", { "x-request-id": "log-other", ...cookie(tok) }), {
      kind: "other",
      status: 404,
      path: "/elsewhere",
    }],
  ];
  for (const [id, p, want] of sends) {
    const res = await p;
    await res.body?.cancel();
    const line = accessLine(id);
    assert.ok(line, `no access line for ${id}`);
    for (const [k, v] of Object.entries(want)) assert.equal(line.properties[k], v, `${id}.${k}`);
    assert.equal(line.properties.status, res.status);
    assert.equal(typeof line.properties.duration_ms, "number");
    assert.equal(line.properties.role, "~anonymous");
  }
});

/** Parses the Prometheus text into `name{labels}` → value. */
async function scrape(): Promise<Map<string, number>> {
  const res = await srv.get("/svc/metrics");
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type")!, /^text\/plain/);
  const out = new Map<string, number>();
  for (const line of (await res.text()).split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}
const delta = (a: Map<string, number>, b: Map<string, number>, key: string) =>
  (b.get(key) ?? 0) - (a.get(key) ?? 0);

Deno.test("/svc/metrics after a mixed load counts exactly the requests sent", async () => {
  const before = await scrape();
  const tok = await token({ role: "~anonymous", iat: now(), exp: now() + 600, n: "metrics" });
  const load: Promise<Response>[] = [];
  for (let i = 0; i < 7; i++) load.push(srv.post("/svc", { relation: "artist", limit: 2 }));
  for (let i = 0; i < 5; i++) load.push(srv.get("/svc?relation=genre&limit=1"));
  for (let i = 0; i < 3; i++) load.push(srv.post("/svc", { relation: "no_such_relation" }));
  for (let i = 0; i < 2; i++) load.push(srv.post("/svc", { function: "boom" }));
  for (let i = 0; i < 4; i++) load.push(srv.get("/svc/health/live"));
  load.push(srv.get("/nothing/here"));
  // The same token twice: one cryptographic verification, then a cache hit.
  load.push(srv.post("/svc", { relation: "genre", limit: 1 }, cookie(tok)));
  for (const r of await Promise.all(load)) await r.body?.cancel();
  const again = await srv.post("/svc", { relation: "genre", limit: 1 }, cookie(tok));
  await again.body?.cancel();
  assert.equal(await srv.server.runtime.reload("signal"), true);
  const after = await scrape();

  const req = (kind: string, status: number) =>
    delta(before, after, `svc_http_requests_total{kind="${kind}",status="${status}"}`);
  assert.equal(req("svc", 200), 9);
  assert.equal(req("svc_get", 200), 5);
  assert.equal(req("svc", 404), 3); // unknown relations
  assert.equal(req("svc", 400), 2); // divisions by zero
  assert.equal(req("health", 200), 4);
  assert.equal(req("other", 404), 1);
  // The previous scrape counts once it has been answered; this one is not counted yet.
  assert.equal(req("metrics", 200), 1);
  assert.equal(
    delta(before, after, `svc_http_request_duration_seconds_count{kind="svc"}`),
    14,
  );
  assert.equal(
    delta(before, after, `svc_http_request_duration_seconds_bucket{le="+Inf",kind="svc_get"}`),
    5,
  );
  assert.equal(delta(before, after, `svc_db_errors_total{class="22"}`), 2);
  assert.equal(delta(before, after, `svc_reloads_total{reason="signal",outcome="ok"}`), 1);
  assert.equal(delta(before, after, "svc_reload_duration_seconds_count"), 1);
  assert.equal(delta(before, after, "svc_token_cache_misses"), 1);
  assert.equal(delta(before, after, "svc_token_cache_hits"), 1);
  assert.equal(after.get("svc_pool_size"), 4);
  assert.equal(after.get("svc_pool_in_use"), 0);
  assert.equal(after.get("svc_pool_waiting"), 0);
  assert.equal(after.get("svc_wellknown_active"), 0);
  assert.equal(after.get("svc_uncaught_errors"), 0);
  assert.ok(after.get("svc_process_resident_memory_bytes")! > 10_000_000);
  assert.ok(after.has("svc_token_cache_hit_ratio"));
});

/** A free TCP port (closed again at once). */
function freePort(hostname = "127.0.0.1"): number {
  const l = Deno.listen({ hostname, port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

/** GET `url`: its status and body, or null when nothing listens there. */
async function tryGet(url: string): Promise<{ status: number; body: string } | null> {
  try {
    const r = await fetch(url);
    return { status: r.status, body: await r.text() };
  } catch (e) {
    if (e instanceof TypeError && /refused/i.test(String(e.cause ?? e.message))) return null;
    throw e;
  }
}

Deno.test("/svc/metrics is off on the main listener by default (404 like an unknown path)", async () => {
  const off = await startServer(uri);
  try {
    const res = await off.get("/svc/metrics");
    assert.equal(res.status, 404);
    assert.equal((await res.json()).code, "HTTP_NOT_FOUND");
  } finally {
    await off.stop();
  }
});

Deno.test("http.metrics.port moves /svc/metrics to its own listener on 127.0.0.1", async () => {
  // The main listener on another loopback address: the metrics listener must not follow http.host.
  const port = freePort();
  const moved = await startServer(uri, [
    "--http.host=127.0.0.2",
    "--http.metrics.enable=true",
    `--http.metrics.port=${port}`,
  ]);
  try {
    const main = await tryGet(`http://127.0.0.2:${moved.server.port}/svc/metrics`);
    assert.equal(main?.status, 404);
    const res = await tryGet(`http://127.0.0.1:${port}/svc/metrics`);
    assert.equal(res?.status, 200);
    assert.match(res!.body, /svc_http_requests_total/);
    assert.equal(await tryGet(`http://127.0.0.2:${port}/svc/metrics`), null);
  } finally {
    await moved.stop();
  }
});

Deno.test("http.metrics.host binds the metrics listener elsewhere", async () => {
  const port = freePort("127.0.0.3");
  const srv = await startServer(uri, [
    `--http.metrics.port=${port}`,
    "--http.metrics.host=127.0.0.3",
  ]);
  try {
    const res = await tryGet(`http://127.0.0.3:${port}/svc/metrics`);
    assert.equal(res?.status, 200);
    assert.match(res!.body, /svc_http_requests_total/);
    assert.equal(await tryGet(`http://127.0.0.1:${port}/svc/metrics`), null);
    const main = await srv.get("/svc/metrics");
    assert.equal(main.status, 404);
    await main.body?.cancel();
  } finally {
    await srv.stop();
  }
});

Deno.test("stop", async () => {
  await srv.stop();
  await stopDb();
});
