/**
 * Batch answers stream (through real svc and real PostgreSQL).
 *
 * - 100 wide items (tracks with 200 keys each) answer with svc's process alive and its RSS
 *   growing by less than 200 MiB. svc runs as a process with a 256 MiB V8 heap, so an answer
 *   built in memory fails at once (it used to: 500 at JSON.stringify, or the process killed by
 *   "out of memory"). Each item reads 700 of the 3,503 tracks (≈ 350 MB of JSON in all, ≈ 30 s);
 *   `BATCH_STREAM_FULL=1` reads them all (≈ 2 GB, 1–3 min), as in the issue.
 * - A streamed batch answers what its items answer one by one; a failure after streaming began
 *   rolls back and ends the answer with an error; a client leaving mid-stream rolls back and frees
 *   the connection; the row-size cap applies to every item.
 */
import assert from "node:assert/strict";
import { type Sql, sqlClient } from "../helpers/sql.ts";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { spawnSvc } from "../helpers/process.ts";
import { cookie, now, startServer, type TestServer, token } from "../helpers/server.ts";
import { readMem, withPeak } from "../../bench/lib/procs.ts";

const LIMIT_MIB = 200;
const ITEMS = 100;
const KEYS = 200;
const FULL = Deno.env.get("BATCH_STREAM_FULL") === "1";

/** The wide batch: `ITEMS` times every track with `KEYS` keys (each the track's name). */
export function wideBatch(items = ITEMS, extra: Record<string, unknown> = {}): unknown[] {
  const select = Object.fromEntries(Array.from({ length: KEYS }, (_, i) => [`k${i}`, "name"]));
  return Array.from({ length: items }, () => ({ relation: "track", select, ...extra }));
}

async function post(url: string, body: unknown): Promise<Response> {
  return await fetch(`${url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

Deno.test({
  name: "a batch of 100 wide items streams: answered, process alive, RSS growth < 200 MiB",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const uri = await chinookDb();
    const svc = await spawnSvc(
      [`--pg.uri=${uri}`, "--http.workers=1", "--pg.pool_size=2", "--logging.level=error"],
      { DENO_V8_FLAGS: "--max-old-space-size=256" },
    );
    try {
      await svc.waitHealthy();
      const pid = svc.child.pid;
      // Warm up: the batch path, a streamed read, the compile of the wide select.
      for (let i = 0; i < 3; i++) {
        const r = await post(svc.url, wideBatch(2, { limit: 5 }));
        assert.equal(r.status, 200);
        assert.equal((await r.json()).length, 2);
        await (await post(svc.url, { relation: "track" })).body?.cancel();
      }
      // One item read alone: the batch answers `[` + ITEMS such answers joined by `,` + `]`.
      const one = wideBatch(1, FULL ? {} : { limit: 700 })[0];
      const single = await post(svc.url, one);
      assert.equal(single.status, 200);
      const itemBytes = (await single.arrayBuffer()).byteLength;
      const baseline = readMem(pid).rss_mb;
      let status = 0;
      let bytes = 0;
      let head = "";
      let tail = new Uint8Array(0);
      const { peak } = await withPeak(pid, async () => {
        const r = await post(svc.url, wideBatch(ITEMS, FULL ? {} : { limit: 700 }));
        status = r.status;
        for await (const chunk of r.body!) {
          if (head.length < 16) head += new TextDecoder().decode(chunk.subarray(0, 16));
          bytes += chunk.length;
          tail = chunk.subarray(Math.max(0, chunk.length - 2));
        }
      }, 20);
      const growth = peak - baseline;
      console.log(
        `wide batch: ${status}, ${(bytes / 1e6).toFixed(0)} MB, RSS ${baseline.toFixed(0)} → ` +
          `${peak.toFixed(0)} MiB (+${growth.toFixed(0)} MiB, limit ${LIMIT_MIB} MiB)`,
      );
      assert.equal(status, 200);
      assert.match(head, /^\[\[\{\s*"k0"/);
      assert.equal(new TextDecoder().decode(tail), "]]", "the answer is complete");
      assert.ok(itemBytes > (FULL ? 1.5e7 : 3e6), `${itemBytes} bytes an item`);
      assert.equal(bytes, ITEMS * itemBytes + ITEMS + 1, "every item streamed whole");
      assert.ok(growth < LIMIT_MIB, `RSS grew by ${growth.toFixed(0)} MiB`);
      // Still alive and serving.
      const after = await post(svc.url, { relation: "genre", limit: 1 });
      assert.equal(after.status, 200);
      await after.body?.cancel();
    } finally {
      await svc.stop();
    }
  },
});

const FIXTURE = `
create function boom() returns int language plpgsql as $$ begin raise exception 'boom'; end $$;
grant execute on function boom() to "~anonymous", app_user;
`;

async function withServer(
  flags: string[],
  fn: (s: TestServer, sql: Sql) => Promise<void>,
) {
  const uri = await chinookDb("batch_stream", FIXTURE);
  const s = await startServer(uri, flags);
  const sql = sqlClient(uri);
  try {
    await fn(s, sql);
  } finally {
    await sql.end();
    await s.stop();
  }
}

/** A session of `app_user`, who may write. */
async function appUser(): Promise<HeadersInit> {
  const t = now();
  return cookie(await token({ role: "app_user", iat: t, exp: t + 1800 }));
}

/** The whole body, or null when the answer ended with an error. */
async function text(r: Response): Promise<string | null> {
  try {
    return await r.text();
  } catch {
    return null;
  }
}

const TRACK = {
  relation: "track",
  select: ["track_id", "name", "album_id", "composer", "milliseconds", "unit_price"],
  order_by: ["track_id"],
};

Deno.test("a streamed batch answers the same as its items one by one", async () => {
  await withServer(["--pg.query.allow_count=true", "--pg.query.allow_rollback=true"], async (s) => {
    const items = [
      TRACK,
      { query: TRACK, count: true },
      { relation: "genre", order_by: ["genre_id"] },
      { query: { relation: "genre", limit: 2 }, count: true, returns: "none" },
      { relation: "genre", where: ["<", "genre_id", 0] },
      { query: { relation: "genre", where: ["<", "genre_id", 0] }, rollback: true },
      TRACK,
    ];
    const r = await s.post("/svc", items);
    assert.equal(r.status, 200);
    const body = await r.text();
    assert.ok(body.length > 1024 * 1024, `${body.length} bytes: more than the buffer, streamed`);
    const got = JSON.parse(body);
    assert.equal(got.length, items.length);
    for (let i = 0; i < items.length; i++) {
      const one = await s.post("/svc", items[i]);
      assert.equal(one.status, 200);
      assert.deepEqual(got[i], await one.json(), `item ${i}`);
    }
    assert.equal(got[1].count, 3503);
    assert.equal(got[1].result.length, 3503);
    assert.deepEqual(got[3], { count: 25, offset: 0, limit: 2 });
    assert.deepEqual(got[4], []);
    assert.deepEqual(got[5], []);
  });
});

Deno.test("a batch failing after its answer started streaming rolls back; the answer ends with an error", async () => {
  await withServer([], async (s, sql) => {
    const mark = `streamed-${crypto.randomUUID()}`;
    const r = await s.post("/svc", [
      { query: { relation: "genre", select: ["genre_id", "name"] }, data: [{ name: mark }] },
      ...wideBatch(1, { limit: 400 }), // ≈ 2 MB: more than the buffer, so streaming has begun
      { function: "boom" },
    ], await appUser());
    assert.equal(r.status, 200, "the status went out with the first bytes");
    const body = await text(r);
    let complete = body !== null;
    try {
      JSON.parse(body ?? "");
    } catch {
      complete = false;
    }
    assert.equal(complete, false, "a batch cut by an error must not parse as JSON");
    const [{ n }] = await sql`select count(*)::int as n from genre where name = ${mark}`;
    assert.equal(n, 0, "the write of the batch was rolled back");
    // The same failure in a batch that fits the buffer keeps its status and index.
    const small = await s.post("/svc", [
      { query: { relation: "genre", select: ["genre_id", "name"] }, data: [{ name: mark }] },
      { function: "boom" },
    ], await appUser());
    assert.equal(small.status, 400);
    assert.equal(small.headers.get("x-svc-errorcode"), "PG_P0001");
    assert.equal((await small.json()).details.index, 1);
    const [{ m }] = await sql`select count(*)::int as m from genre where name = ${mark}`;
    assert.equal(m, 0);
  });
});

Deno.test("a client leaving a streaming batch rolls it back and frees its connection", async () => {
  await withServer(["--pg.pool_size=1"], async (s, sql) => {
    const mark = `left-${crypto.randomUUID()}`;
    const ac = new AbortController();
    const r = await fetch(`${s.url}/svc`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(await appUser()) },
      body: JSON.stringify([
        { query: { relation: "genre", select: ["genre_id", "name"] }, data: [{ name: mark }] },
        ...wideBatch(5),
      ]),
      signal: ac.signal,
    });
    assert.equal(r.status, 200);
    const reader = r.body!.getReader();
    await reader.read();
    ac.abort();
    await reader.cancel().catch(() => {});
    const t0 = Date.now();
    for (;;) {
      const ready = await (await s.get("/svc/health/ready")).json();
      if (ready.pool.in_use === 0) break;
      assert.ok(Date.now() - t0 < 10_000, "the connection was never given back");
      await new Promise((r) => setTimeout(r, 50));
    }
    const [{ n }] = await sql`select count(*)::int as n from genre where name = ${mark}`;
    assert.equal(n, 0, "nothing of the batch committed");
    const ok = await s.post("/svc", { relation: "genre", limit: 1 });
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
  });
});

Deno.test("pg.query.max_row_size applies to every row of every batch item", async () => {
  await withServer(["--pg.query.max_row_size=2000"], async (s) => {
    const genreWithTracks = {
      relation: "genre",
      where: ["=", "genre_id", 1],
      join: { tracks: { relation: "track", on: { genre_id: "genre_id" } } },
    };
    const r = await s.post("/svc", [{ relation: "genre", limit: 1 }, genreWithTracks]);
    assert.equal(r.status, 400);
    assert.equal(r.headers.get("x-svc-errorcode"), "QUERY_RESULT_TOO_LARGE");
    assert.equal((await r.json()).details.index, 1);
    const complex = await s.post("/svc", [{ query: genreWithTracks, sql: true }]);
    assert.equal(complex.status, 400);
    assert.equal(complex.headers.get("x-svc-errorcode"), "QUERY_RESULT_TOO_LARGE");
    await complex.body?.cancel();
  });
});

Deno.test("teardown", async () => {
  await stopDb();
});
