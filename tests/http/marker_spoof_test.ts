/**
 * svc's refusal markers cannot be forged by a request (src/util/markers.ts). svc's own SQL fails a
 * row over the size cap, or a write's check, by casting marked text to an integer, and recognises
 * the refusal by the marker in the error text; a request casting its own text made the same error:
 * `"svc:row_too_large:123"` answered 400 QUERY_RESULT_TOO_LARGE, and a write check's marker, which
 * `sql: true` printed, cast in a write's select answered 500 INTERNAL. Now the markers hold a
 * secret per process that no SQL or plan shown to a client carries.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const uri = await chinookDb("marker_spoof");
const srv = await startServer(uri, ["--dev"]); // sql and query_plan allowed
const t = now();
const user = cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }));

async function post(body: unknown) {
  const r = await srv.post("/svc", body, user);
  const text = await r.text();
  return { status: r.status, code: r.headers.get("x-svc-errorcode"), text };
}

const WRITE = { relation: "genre", write_mode: "merge", select: ["genre_id", "name"] };

Deno.test("what svc shows of its SQL and plans never carries a marker's secret", async () => {
  const shown = await post({
    query: WRITE,
    data: [{ genre_id: 1, name: "Rock" }],
    sql: true,
    query_plan: true,
    rollback: true,
  });
  assert.equal(shown.status, 200, shown.text);
  assert.doesNotMatch(shown.text, /svc-write-check-[0-9a-f]{8}/);
  assert.doesNotMatch(shown.text, /svc:row_too_large:[0-9a-f]{16}/);
  const batch = await post([{ query: WRITE, data: [{ genre_id: 1, name: "Rock" }], sql: true }]);
  assert.equal(batch.status, 200, batch.text);
  assert.doesNotMatch(batch.text, /svc-write-check-[0-9a-f]{8}/);
  assert.match(
    shown.text,
    /svc-write-check-private/,
    "the checks are shown, their secret replaced",
  );
});

Deno.test("a request's own text cast like a marker is the data error it is, never svc's refusal", async () => {
  for (
    const text of [
      "svc:row_too_large:123",
      "svc:row_too_large:private:123",
      "svc-write-check-private:0:0",
      "svc-write-check-00000000:0:0",
    ]
  ) {
    const read = await post({ relation: "artist", select: { x: ["cast", [text], "integer"] } });
    assert.equal(read.status, 400, read.text);
    assert.equal(read.code, "PG_22P02", read.text);
    const write = await post({
      query: {
        relation: "genre",
        write_mode: "merge",
        select: { genre_id: "genre_id", name: "name", x: ["get", ["cast", [text], "integer"]] },
      },
      data: [{ genre_id: 1, name: "Rock" }],
      rollback: true,
    });
    assert.equal(write.status, 400, write.text);
    assert.equal(write.code, "PG_22P02", write.text);
  }
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
