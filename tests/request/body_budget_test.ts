/**
 * The large-body budget's rules without I/O (src/request/body_budget.ts): small bodies are never
 * counted, large ones run while they fit or alone, waiters are admitted in arrival order, and a
 * wait ends with 503 HTTP_BUSY at its limit or when the client leaves.
 */
import assert from "node:assert/strict";
import { BodyBudget, LARGE_BODY, ReceiveBudget } from "../../src/request/body_budget.ts";
import { SvcError } from "../../src/svc_error.ts";

/** A piece of work that finishes when told to. */
function gate(): { work: () => Promise<string>; open: (v: string) => void; started: boolean } {
  let open!: (v: string) => void;
  const done = new Promise<string>((r) => (open = r));
  const g = {
    started: false,
    open,
    work: () => {
      g.started = true;
      return done;
    },
  };
  return g;
}

const tick = () => new Promise((r) => setTimeout(r, 0));

Deno.test("large bodies share the budget; one beyond it runs alone; small ones are not counted", async () => {
  const b = new BodyBudget(3 * LARGE_BODY);
  const a = gate(), c = gate(), d = gate(), big = gate();
  const pa = b.run(2 * LARGE_BODY, 10_000, null, a.work);
  const pc = b.run(LARGE_BODY, 10_000, null, c.work);
  await tick();
  assert.equal(a.started && c.started, true, "both fit: 3 × LARGE_BODY");
  assert.equal(b.held, 3 * LARGE_BODY);
  // Beyond the budget alone: waits for both; a small body meanwhile runs at once, uncounted.
  const pbig = b.run(10 * LARGE_BODY, 10_000, null, big.work);
  const pd = b.run(LARGE_BODY, 10_000, null, d.work);
  assert.equal(await b.run(LARGE_BODY - 1, 10_000, null, () => Promise.resolve("small")), "small");
  await tick();
  assert.equal(big.started, false);
  assert.equal(d.started, false, "arrival order: the later body waits behind the big one");
  assert.equal(b.waiting, 2);
  a.open("a");
  assert.equal(await pa, "a");
  await tick();
  assert.equal(big.started, false, "still one body in progress");
  c.open("c");
  await pc;
  await tick();
  assert.equal(big.started, true, "alone now");
  assert.equal(d.started, false, "nothing runs beside a body beyond the budget");
  big.open("big");
  await pbig;
  await tick();
  assert.equal(d.started, true);
  d.open("d");
  await pd;
  assert.equal(b.held, 0);
  assert.equal(b.waiting, 0);
});

Deno.test("a failing body gives its room back", async () => {
  const b = new BodyBudget(LARGE_BODY);
  await assert.rejects(b.run(LARGE_BODY, 1000, null, () => Promise.reject(new Error("boom"))));
  assert.equal(b.held, 0);
  assert.equal(await b.run(LARGE_BODY, 1000, null, () => Promise.resolve(1)), 1);
});

Deno.test("a wait ends with 503 HTTP_BUSY at its limit, or when the client leaves", async () => {
  // The shared deadline timer does not keep a process alive (a server does): this one does.
  const alive = setTimeout(() => {}, 10_000);
  const b = new BodyBudget(LARGE_BODY);
  const first = gate();
  const p1 = b.run(LARGE_BODY, 1000, null, first.work);
  const t0 = performance.now();
  await assert.rejects(
    b.run(LARGE_BODY, 200, null, () => Promise.resolve("never")),
    (e) => e instanceof SvcError && e.code === "HTTP_BUSY" && e.status === 503,
  );
  assert.ok(performance.now() - t0 >= 190, "waited its limit");
  const ac = new AbortController();
  const left = b.run(LARGE_BODY, 60_000, ac.signal, () => Promise.resolve("never"));
  const next = gate();
  const p3 = b.run(LARGE_BODY, 60_000, null, next.work);
  await tick();
  assert.equal(b.waiting, 2);
  ac.abort();
  await assert.rejects(left, (e) => e instanceof SvcError && e.code === "HTTP_BUSY");
  assert.equal(b.waiting, 1);
  first.open("1");
  await p1;
  await tick();
  assert.equal(next.started, true, "the one behind the leaver runs");
  next.open("3");
  assert.equal(await p3, "3");
  assert.equal(b.held, 0);
  clearTimeout(alive);
});

Deno.test("budget 0: no limit", async () => {
  const b = new BodyBudget(0);
  const a = gate(), c = gate();
  const pa = b.run(100 * LARGE_BODY, 1000, null, a.work);
  const pc = b.run(100 * LARGE_BODY, 1000, null, c.work);
  await tick();
  assert.equal(a.started && c.started, true);
  a.open("a");
  c.open("c");
  await Promise.all([pa, pc]);
});

Deno.test("bodies waiting for room stay within the receive budget: past it 503 at once", async () => {
  // Found by a probe: twelve 900 KB bodies read whole waited (in memory) up to 30 s each, counted
  // by neither budget.
  const b = new BodyBudget(LARGE_BODY, new ReceiveBudget(3 * LARGE_BODY));
  const running = gate();
  const p = b.run(LARGE_BODY, 10_000, null, running.work);
  const waiting = [gate(), gate(), gate()].map((g) => b.run(LARGE_BODY, 10_000, null, g.work));
  await tick();
  assert.equal(b.waiting, 3);
  await assert.rejects(
    () => b.run(LARGE_BODY, 10_000, null, () => Promise.resolve("never")),
    (e) => e instanceof SvcError && e.code === "HTTP_BUSY",
  );
  assert.equal(b.waiting, 3, "the refused one never waited");
  running.open("done");
  assert.equal(await p, "done");
  // Each admitted waiter gives its queued bytes back (its own work never finishes here).
  await tick();
  assert.equal(b.waiting, 2);
  void waiting;
});

Deno.test("the receive budget: chunks past it are refused unless their body arrives alone", () => {
  const r = new ReceiveBudget(100);
  const one = r.start();
  one.add(150); // alone: beyond the budget, still received
  const two = r.start();
  assert.throws(() => two.add(1), (e) => e instanceof SvcError && e.code === "HTTP_BUSY");
  two.end();
  one.end();
  one.end(); // twice: counted once
  assert.equal(r.held, 0);
  const three = r.start();
  three.add(100);
  three.end();
  assert.equal(r.held, 0);
});
