/**
 * What a request's values or shape make PostgreSQL refuse as a limit of its own (SQLSTATE class
 * 54: an array nested deeper than 6, a tsvector word over 2 KB) or as a row met twice (21000: one
 * upsert naming a key twice in spellings PostgreSQL reads as one value) is the request's 400, not
 * a 500 "internal database error" (docs/query.md, the SQLSTATE table). Found by a hostile client:
 * each answered 500, the first two to anonymous requests.
 */
import assert from "node:assert/strict";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const srv = await startServer(await chinookDb());

async function refused(body: unknown, code: string, headers?: HeadersInit): Promise<void> {
  const res = await srv.post("/svc", body, headers);
  const text = await res.text();
  assert.equal(res.status, 400, text);
  assert.equal(JSON.parse(text).code, code, text);
  assert.notEqual(JSON.parse(text).message, "internal database error");
}

Deno.test("PostgreSQL's program limits reached by a request's values are 400", async () => {
  const deep = ["arr", ["arr", ["arr", ["arr", ["arr", ["arr", ["arr", 1]]]]]]];
  for (
    const select of [
      { x: ["cast", ["{{{{{{{1}}}}}}}"], "int[]"] },
      { x: deep },
      { x: ["cast", ["a".repeat(3000)], "tsvector"] },
    ]
  ) {
    await refused({ relation: "artist", limit: 1, select }, "PG_54000");
  }
  // The same in a batch item: the batch's 400.
  await refused([{ relation: "artist", limit: 1, select: { x: deep } }], "PG_54000");
});

Deno.test("one upsert naming a key twice in two spellings is 400, and writes nothing", async () => {
  const t = now();
  const session = cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }));
  const before = await psql("select count(*) from playlist_track");
  for (const write_mode of ["merge", "upsert"]) {
    await refused(
      {
        query: { relation: "playlist_track", write_mode, select: ["playlist_id", "track_id"] },
        data: [
          { playlist_id: 1, track_id: 3402 },
          { playlist_id: "1", track_id: "03402" },
          { playlist_id: 1, track_id: 1 },
        ],
      },
      "PG_21000",
      session,
    );
  }
  assert.equal(await psql("select count(*) from playlist_track"), before);
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
