/**
 * A batch's reads close their portals once read to the end (with the next statement sent, no
 * round trip of their own), so a transaction reading many does not hold every one's executor
 * memory until commit. Found by a hostile client: a batch of 100 reads of 50 joins each left its
 * backend +200 to 450 MB (ten at once: +3 GB of PostgreSQL memory).
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

const FIXTURE = `
create function open_portals() returns int volatile language sql
  as $$ select count(*)::int from pg_cursors where name like 'svc_rows%' $$;
grant execute on function open_portals() to "~anonymous";
`;
const srv = await startServer(await chinookDb("batch_portals", FIXTURE));

Deno.test("a batch's finished reads hold no open portal", async () => {
  const res = await srv.post("/svc", [
    { relation: "genre", order_by: ["genre_id"] },
    { relation: "artist", limit: 3 },
    { relation: "track", limit: 1500, select: ["track_id"] },
    { function: "open_portals" },
  ]);
  const text = await res.text();
  assert.equal(res.status, 200, text);
  const answers = JSON.parse(text);
  assert.equal(answers[2].length, 1500, "a read of more than one fetch");
  // Only the portal reading pg_cursors itself is open.
  assert.deepEqual(answers[3], [{ open_portals: 1 }]);
});

Deno.test("stop", async () => {
  await srv.stop();
  await stopDb();
});
