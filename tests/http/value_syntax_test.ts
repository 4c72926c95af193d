/**
 * A client value a type's input function cannot read with a "syntax error" (42601 raised by the
 * tsvector or tsquery input, without a statement position) is the client's 400 PG_22P02, like any
 * value; only svc's own SQL could make a 42601 with a position, which stays a 500. Found by the
 * fuzzers' stricter invariant (FUZZ_SEED=12 and 13, 10,000 runs): both answered 500 PG_42601.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

const srv = await startServer(await chinookDb());

Deno.test("a literal cast to tsvector that tsvector cannot read is 400 PG_22P02", async () => {
  const res = await srv.post("/svc", {
    relation: "genre",
    select: { v: ["cast", ["'>|"], "tsvector"] },
    limit: 1,
  });
  const body = await res.json();
  assert.equal(res.status, 400, JSON.stringify(body));
  assert.equal(body.code, "PG_22P02");
  assert.match(body.message, /syntax error in tsvector/);
  const ok = await srv.post("/svc", {
    relation: "genre",
    select: { v: ["cast", ["rock roll"], "tsvector"] },
    limit: 1,
  });
  assert.equal(ok.status, 200);
  assert.deepEqual(await ok.json(), [{ v: "'rock' 'roll'" }]);
});

Deno.test("an fts operand given as a literal tsvector text is 400 when unreadable", async () => {
  const res = await srv.post("/svc", {
    relation: "media_type",
    where: ["fts", ['{"a":1}'], "name"],
  });
  const body = await res.json();
  assert.equal(res.status, 400, JSON.stringify(body));
  assert.equal(body.code, "PG_22P02");
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
