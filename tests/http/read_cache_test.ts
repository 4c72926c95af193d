/** The compiled-read cache (src/http/svc.ts): bounded, a hot entry survives, a new state empties it. */
import assert from "node:assert/strict";
import { type CachedRead, ReadCache } from "../../src/http/svc.ts";
import type { AppState } from "../../src/runtime.ts";

const stmt = (sql: string): CachedRead => ({ sql, params: [], small: true });

Deno.test("read cache: bounded; an entry hit between insertions is never evicted", () => {
  const state = {} as AppState;
  const cache = new ReadCache(4);
  cache.get(state, "x"); // binds the state
  cache.set("hot", stmt("hot"));
  for (let i = 0; i < 50; i++) {
    cache.set(`cold${i}`, stmt(`cold${i}`));
    assert.equal(cache.get(state, "hot")?.sql, "hot", `after ${i + 1} insertions`);
  }
  // Only the last three cold entries are left besides the hot one.
  assert.equal(cache.get(state, "cold46"), undefined);
  for (const k of ["cold47", "cold48", "cold49"]) assert.equal(cache.get(state, k)?.sql, k);
  // Without hits, insertion order decides.
  cache.set("new1", stmt("new1"));
  assert.equal(cache.get(state, "hot")?.sql, "hot");
  assert.equal(cache.get(state, "cold47"), undefined);
});

Deno.test("read cache: another state (a reload) empties it", () => {
  const cache = new ReadCache(4);
  const a = {} as AppState;
  cache.get(a, "k");
  cache.set("k", stmt("k"));
  assert.equal(cache.get(a, "k")?.sql, "k");
  assert.equal(cache.get({} as AppState, "k"), undefined);
  assert.equal(cache.get(a, "k"), undefined);
});
