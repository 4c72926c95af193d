/**
 * Well-known queries through real HTTP: POST read, GET with decoded params, ComplexQuery with
 * flags, writes with stats, batch elements, parameter errors before any SQL.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

const root = new URL("../../wellknown", import.meta.url).pathname;
const extra = await Deno.makeTempDir({ prefix: "svc-wk-" });
await Deno.writeTextFile(
  `${extra}/probe.json`,
  JSON.stringify([
    {
      name: "echo",
      params: {
        v: { type: "any", default: null },
      },
      query: { function: "echo_json", arguments: { v: ["$param", "v"] } },
    },
    {
      name: "new_genre",
      params: {},
      query: { relation: "genre", select: ["genre_id", "name"] },
    },
  ]),
);
const uri = await chinookDb(
  "wkhttp",
  `
  create function echo_json(v jsonb) returns table (v jsonb, t text) language sql stable as $$ select v, jsonb_typeof(v) $$;
  grant execute on function echo_json(jsonb) to "~anonymous";
  grant insert on genre to "~anonymous";
`,
);
const srv = await startServer(uri, ["--dev", `--pg.query.wellknown_path=${root}:${extra}`]);

async function post(body: unknown) {
  const res = await srv.post("/svc", body);
  return { status: res.status, code: res.headers.get("x-svc-errorcode"), body: await res.json() };
}

Deno.test("POST and GET run a shipped well-known query with the same answer", async () => {
  const p = await post({ wellknown: "artist_albums", params: { artist_id: 1 } });
  assert.equal(p.status, 200);
  assert.equal(p.body[0].name, "AC/DC");
  assert.equal(p.body[0].albums.length, 2);
  const g = await srv.get("/svc?wellknown=artist_albums&params.artist_id=1");
  assert.deepEqual(await g.json(), p.body);
  const y = await srv.get(
    "/svc?wellknown=tracks_by_genre&params.genre=Jazz&params.min_seconds=300",
  );
  const rows = await y.json();
  assert.ok(rows.length > 0 && rows.length <= 10);
  assert.ok(
    rows.every((r: { genre: string; milliseconds: number }) =>
      r.genre === "Jazz" && r.milliseconds >= 300000
    ),
  );
  const h = await post({ wellknown: "invoice_lines", params: { invoice_id: 1 } });
  assert.equal(h.status, 200);
  assert.equal(h.body.length, 2);
});

Deno.test("GET params decoding: number, boolean, array, quoted string, plain string", async () => {
  const cases: [string, unknown, string][] = [
    ["42", 42, "number"],
    ["true", true, "boolean"],
    [encodeURIComponent("[1,2]"), [1, 2], "array"],
    [encodeURIComponent('"123"'), "123", "string"],
    ["hello", "hello", "string"],
  ];
  for (const [raw, value, type] of cases) {
    const r = await srv.get(`/svc?wellknown=echo&params.v=${raw}`);
    assert.equal(r.status, 200, raw);
    assert.deepEqual(await r.json(), [{ v: value, t: type }], raw);
  }
  const none = await srv.get("/svc?wellknown=echo");
  assert.deepEqual(await none.json(), [{ v: null, t: null }]);
});

Deno.test("well-known in a ComplexQuery, a write with stats, and a batch", async () => {
  const c = await post({
    query: { wellknown: "artist_albums", params: { artist_id: 2 } },
    count: true,
    sql: true,
  });
  assert.equal(c.status, 200);
  assert.equal(c.body.count, 1);
  assert.equal(c.body.sql.length, 1);
  const w = await post({
    query: { wellknown: "new_genre" },
    data: [{ name: "Well-known genre" }],
    stats: true,
  });
  assert.equal(w.status, 200, JSON.stringify(w.body));
  assert.equal(w.body.result[0].name, "Well-known genre");
  assert.deepEqual(w.body.stats, [{
    path: [],
    table: "public.genre",
    submitted: 1,
    inserted: 1,
    updated: 0,
    deleted: 0,
  }]);
  const b = await post([{ wellknown: "artist_albums", params: { artist_id: 1 } }, {
    relation: "genre",
    limit: 1,
  }]);
  assert.equal(b.status, 200);
  assert.equal(b.body[0][0].name, "AC/DC");
});

Deno.test("unknown or deactivated names and param errors", async () => {
  const u = await post({ wellknown: "nope" });
  assert.equal(u.status, 404);
  assert.equal(u.code, "WELL_KNOWN_UNKNOWN_QUERY");
  const d = await post({ wellknown: "artist_albums_draft" });
  assert.equal(d.code, "WELL_KNOWN_UNKNOWN_QUERY");
  const req = await post({ wellknown: "artist_albums", params: {} });
  assert.equal(req.status, 400);
  assert.equal(req.code, "WELL_KNOWN_PARAM_REQUIRED");
  const mis = await post({ wellknown: "artist_albums", params: { artist_id: "one" } });
  assert.equal(mis.status, 400);
  assert.equal(mis.code, "WELL_KNOWN_PARAM_TYPE_MISMATCH");
  const g = await srv.get("/svc?wellknown=artist_albums&params.artist_id=x");
  assert.equal(g.headers.get("x-svc-errorcode"), "WELL_KNOWN_PARAM_TYPE_MISMATCH");
  await g.body?.cancel();
  const doc = await (await srv.get("/svc/database.json")).json();
  assert.ok(doc.wellknown.some((w: { name: string }) => w.name === "artist_albums"));
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
  await Deno.remove(extra, { recursive: true });
});
