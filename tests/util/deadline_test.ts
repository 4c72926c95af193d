/**
 * src/util/deadline.ts: the shared sweep fires each deadline once, about its time, never a
 * cleared one, and copes with expiries that withdraw, extend or add deadlines.
 */
import assert from "node:assert/strict";
import { type Deadline, deadline, SWEEP_MS } from "../../src/util/deadline.ts";
import { waitFor } from "../helpers/wait.ts";

Deno.test("deadlines: each fires once, cleared ones never, whatever order they are withdrawn in", async () => {
  const fired: number[] = [];
  const all = Array.from({ length: 40 }, (_, i) => deadline(1, () => fired.push(i)));
  // Withdrawn from the middle, the ends and twice (idempotent): the others keep their places.
  for (const i of [0, 39, 17, 18, 5, 5]) all[i].clear();
  const kept = Array.from({ length: 40 }, (_, i) => i).filter((i) =>
    ![0, 39, 17, 18, 5].includes(i)
  );
  await waitFor(() => fired.length === kept.length, { what: "the deadlines not cleared to fire" });
  assert.deepEqual([...fired].sort((a, b) => a - b), kept);
  // Cleared after firing: nothing happens; none fires twice.
  for (const d of all) d.clear();
  const later = deadline(1, () => fired.push(-1));
  await waitFor(() => fired.includes(-1), { what: "a later deadline to fire" });
  assert.deepEqual(fired.length, kept.length + 1);
  later.clear();
});

Deno.test("deadlines: an expiry may withdraw or extend another due one, or add one", async () => {
  const fired: string[] = [];
  const others: { b?: Deadline; c?: Deadline } = {};
  const a = deadline(1, () => {
    fired.push("a");
    others.b?.clear();
    others.c?.extend(60_000);
    deadline(1, () => fired.push("d"));
  });
  others.b = deadline(1, () => fired.push("b"));
  const c = others.c = deadline(1, () => fired.push("c"));
  await waitFor(() => fired.includes("d"), { what: "the deadline added by an expiry to fire" });
  // b and c were due with a in the same sweep; whichever ran first, a's withdrawal and extension
  // hold for what had not fired yet, and nothing fires twice.
  assert.ok(fired.filter((f) => f === "a").length === 1);
  assert.ok(fired.length <= 4);
  if (fired.indexOf("b") > fired.indexOf("a")) throw new Error("b fired after a withdrew it");
  if (fired.indexOf("c") > fired.indexOf("a")) throw new Error("c fired after a extended it");
  a.clear();
  c.clear();
});

Deno.test("deadlines: extended ones wait for their new time", async () => {
  let fired = false;
  const t0 = performance.now();
  const d = deadline(1, () => (fired = true));
  d.extend(3 * SWEEP_MS);
  await waitFor(() => fired, { what: "the extended deadline to fire" });
  assert.ok(performance.now() - t0 >= 3 * SWEEP_MS - 1, "fired before its extended time");
});
