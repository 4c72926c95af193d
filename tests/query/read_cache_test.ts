/**
 * The compiled-read cache (src/query/cache.ts) is bounded by entries and by estimated bytes: through
 * real HTTP, more distinct reads than it holds are all answered right; the cache (the server's
 * one is built with the defaults) stays within 1000 entries and 8 MiB and evicts least recently
 * used entries to stay within both.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";
import { type CachedRead, ReadCache, readCacheEntryBytes } from "../../src/query/cache.ts";
import type { AppState } from "../../src/state/runtime.ts";

Deno.test("read cache: more distinct requests than it holds are all answered right", async () => {
  const uri = await chinookDb("read_cache");
  const srv = await startServer(uri);
  try {
    for (let i = 1; i <= 1100; i++) {
      const res = await srv.post("/svc", { relation: "track", where: ["=", "track_id", i] });
      const rows = await res.json();
      assert.equal(res.status, 200);
      assert.equal(rows[0].track_id, i);
    }
  } finally {
    await srv.stop();
    await stopDb();
  }
});

const state = {} as AppState;
const stmt = (sqlChars: number): CachedRead => ({
  sql: "s".repeat(sqlChars),
  params: [1],
  read: { small: true, seen: {} },
});

Deno.test("read cache: by default never past 1000 entries or 8 MiB", () => {
  const cache = new ReadCache();
  cache.get(state, "k"); // binds the cache to this state
  for (let i = 1; i <= 1100; i++) {
    cache.set(`{"relation":"track","where":["=","track_id",${i}]}`, stmt(400));
    const s = cache.stats();
    assert.ok(s.size <= 1000 && s.bytes <= 8 * 1024 * 1024, JSON.stringify(s));
  }
  assert.equal(cache.stats().size, 1000);
});

Deno.test("read cache: bounded by bytes before entries, oldest out first", () => {
  const one = readCacheEntryBytes("k00", stmt(1000));
  const cache = new ReadCache(100, one * 3);
  cache.get(state, "k00"); // binds the cache to this state
  for (let i = 0; i < 3; i++) cache.set(`k0${i}`, stmt(1000));
  assert.deepEqual(cache.stats(), { size: 3, bytes: one * 3 });
  cache.set("k03", stmt(1000)); // evicts k00, the oldest (a hit moves an entry only later on)
  assert.equal(cache.get(state, "k00"), undefined);
  assert.ok(cache.get(state, "k01") && cache.get(state, "k02") && cache.get(state, "k03"));
  assert.ok(cache.stats().bytes <= one * 3);
  cache.set("big", stmt(one * 3)); // larger than the whole budget: not cached, nothing evicted
  assert.equal(cache.get(state, "big"), undefined);
  assert.equal(cache.stats().size, 3);
  cache.set("k03", stmt(2000)); // replacing an entry recounts its bytes
  assert.ok(cache.stats().bytes <= one * 3);
  assert.equal(cache.stats().size, 2);
});

Deno.test("read cache: bounded by entries; a new state empties it", () => {
  const cache = new ReadCache(5);
  cache.get(state, "x");
  for (let i = 0; i < 20; i++) {
    cache.set(`k${i}`, stmt(10));
    assert.ok(cache.stats().size <= 5);
  }
  assert.ok(cache.get(state, "k19"));
  assert.equal(cache.get(state, "k0"), undefined);
  assert.equal(cache.get({} as AppState, "k19"), undefined);
  assert.deepEqual(cache.stats(), { size: 0, bytes: 0 });
});

const named = (sql: string): CachedRead => ({ sql, params: [], read: { small: true, seen: {} } });

Deno.test("read cache: bounded; an entry hit between insertions is never evicted", () => {
  const state = {} as AppState;
  const cache = new ReadCache(4);
  cache.get(state, "x"); // binds the state
  cache.set("hot", named("hot"));
  for (let i = 0; i < 50; i++) {
    cache.set(`cold${i}`, named(`cold${i}`));
    assert.equal(cache.get(state, "hot")?.sql, "hot", `after ${i + 1} insertions`);
  }
  // Only the last three cold entries are left besides the hot one.
  assert.equal(cache.get(state, "cold46"), undefined);
  for (const k of ["cold47", "cold48", "cold49"]) assert.equal(cache.get(state, k)?.sql, k);
  // Without hits, insertion order decides.
  cache.set("new1", named("new1"));
  assert.equal(cache.get(state, "hot")?.sql, "hot");
  assert.equal(cache.get(state, "cold47"), undefined);
});

Deno.test("read cache: another state (a reload) empties it", () => {
  const cache = new ReadCache(4);
  const a = {} as AppState;
  cache.get(a, "k");
  cache.set("k", named("k"));
  assert.equal(cache.get(a, "k")?.sql, "k");
  assert.equal(cache.get({} as AppState, "k"), undefined);
  assert.equal(cache.get(a, "k"), undefined);
});
