/**
 * Proves "one statement, one round trip" per read on the wire: a loopback TCP proxy between svc's
 * pool and PostgreSQL parses the frontend protocol and counts, per request, the client's bursts
 * (a burst is what the client sends before it next hears from the server) and Execute messages.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";
import { proxy } from "../helpers/pgproxy.ts";
import { waitFor } from "../helpers/wait.ts";

Deno.test("a read is one statement and one round trip before the response", async () => {
  const uri = new URL(await chinookDb());
  const p = proxy(Number(uri.port));
  uri.port = String(p.port);
  const srv = await startServer(uri.toString(), ["--pg.pool_size=1"]);
  try {
    const nested = {
      relation: "artist",
      where: ["<=", "artist_id", 5],
      join: {
        albums: {
          relation: "album",
          on: { artist_id: "artist_id" },
          join: { tracks: { relation: "track", on: { album_id: "album_id" } } },
        },
      },
    };
    // `executes`: the statements each request sends; the count is read once the proxy has seen
    // them all (the commit may trail the response), never after a fixed pause.
    const measure = async (body: unknown, executes: number, n = 10) => {
      for (let i = 0; i < 3; i++) await (await srv.post("/svc", body)).json(); // prepare statements
      Object.assign(p.counters, { bursts: 0, executes: 0, parses: 0 });
      for (let i = 0; i < n; i++) {
        const r = await srv.post("/svc", body);
        assert.equal(r.status, 200);
        await r.json();
      }
      await waitFor(() => p.counters.executes >= executes * n, { what: "every statement sent" });
      return { ...p.counters, n };
    };
    // Known to fit one fetch batch (a limit ≤ 1000, or a unique key pinned by "="): the role
    // switch and the one query in one burst, one transaction (the batch's own, ended by its Sync:
    // no begin, no commit).
    for (
      const body of [{ ...nested, limit: 20 }, { relation: "track", where: ["=", "track_id", 7] }]
    ) {
      const c = await measure(body, 2);
      assert.equal(c.bursts, c.n, "one round trip per request");
      assert.equal(c.executes, 2 * c.n, "role switch and the one query");
      assert.equal(c.parses, 0, "prepared statements reused");
    }
    // Size unknown: begin, role switch and the one query's first rows (a portal with a row limit)
    // in the burst the response waits for; the commit follows once the answer is known complete.
    const c = await measure(nested, 4);
    assert.equal(c.bursts, 2 * c.n, "one round trip before the response, then the commit");
    assert.equal(c.executes, 4 * c.n, "begin, role switch, the query's first rows, commit");
    assert.equal(c.parses, 0, "prepared statements reused");
  } finally {
    await srv.stop();
    p.close();
    await stopDb();
  }
});
