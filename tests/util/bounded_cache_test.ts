import assert from "node:assert/strict";
import { BoundedCache } from "../../src/util/bounded_cache.ts";

Deno.test("bounded cache: always-refresh is LRU; never-refresh is first in, first out", () => {
  for (const refresh of ["always", "never"] as const) {
    const c = new BoundedCache<string, number>({ maxEntries: 2, refresh });
    c.set("a", 1);
    c.set("b", 2);
    assert.equal(c.get("a"), 1);
    c.set("c", 3); // evicts b (LRU) or a (FIFO)
    assert.equal(c.size, 2);
    assert.equal(c.get(refresh === "always" ? "b" : "a"), undefined, refresh);
    assert.equal(c.get(refresh === "always" ? "a" : "b"), refresh === "always" ? 1 : 2, refresh);
  }
});

Deno.test("bounded cache: bytes bound, oversized entries, zero entries, delete and clear", () => {
  const c = new BoundedCache<string, string>({
    maxEntries: 10,
    maxBytes: 10,
    bytes: (_k, v) => v.length,
  });
  c.set("a", "xxxx");
  c.set("b", "xxxx");
  assert.equal(c.bytes, 8);
  c.set("c", "xxxx"); // 12 > 10: the oldest goes
  assert.equal(c.get("a"), undefined);
  assert.deepEqual([c.size, c.bytes], [2, 8]);
  c.set("big", "x".repeat(11)); // larger than the whole budget: not kept, nothing evicted
  assert.deepEqual([c.size, c.get("big")], [2, undefined]);
  c.set("b", "xx"); // replacing recounts
  assert.equal(c.bytes, 6);
  assert.equal(c.delete("b"), true);
  assert.equal(c.delete("b"), false);
  c.clear();
  assert.deepEqual([c.size, c.bytes], [0, 0]);
  const none = new BoundedCache<string, number>({ maxEntries: 0 });
  none.set("a", 1);
  assert.equal(none.get("a"), undefined);
});
