/**
 * src/util/rerun.ts: one run at a time, and a call made while a run is in progress is answered by
 * a run that starts after it (shared by the calls made meanwhile), never by the one in progress.
 */
import assert from "node:assert/strict";
import { oneAtATime } from "../../src/util/rerun.ts";

/** A task whose runs finish when the test says; it records each run's argument. */
function gated() {
  const started: string[] = [];
  const finish: (() => void)[] = [];
  let inProgress = 0;
  let most = 0;
  const task = (arg: string) =>
    new Promise<string>((resolve) => {
      started.push(arg);
      most = Math.max(most, ++inProgress);
      finish.push(() => {
        inProgress--;
        resolve(`${arg}#${started.length}`);
      });
    });
  return { task, started, finish, most: () => most };
}

const tick = () => new Promise((r) => setTimeout(r, 0));

Deno.test("a call while a run is in progress gets the next run, shared by the calls made meanwhile", async () => {
  const g = gated();
  const run = oneAtATime(g.task);
  const a = run("signal");
  await tick();
  const b = run("notify");
  const c = run("notify again");
  assert.equal(b, c, "calls made during the run share the next one");
  assert.deepEqual(g.started, ["signal"], "the next run waits for the one in progress");
  g.finish[0]();
  assert.equal(await a, "signal#1");
  await tick();
  assert.deepEqual(
    g.started,
    ["signal", "notify"],
    "one more run, with the first caller's argument",
  );
  g.finish[1]();
  assert.equal(await b, "notify#2");
  assert.equal(g.most(), 1, "never two runs at once");
  // Idle again: a call starts a run at once.
  const d = run("later");
  await tick();
  assert.deepEqual(g.started, ["signal", "notify", "later"]);
  g.finish[2]();
  assert.equal(await d, "later#3");
});

Deno.test("a failed run does not stop the next one", async () => {
  let n = 0;
  const run = oneAtATime(async (_: string) => {
    n++;
    await tick();
    if (n === 1) throw new Error("first fails");
    return n;
  });
  const a = run("x");
  const b = run("y");
  await assert.rejects(a, /first fails/);
  assert.equal(await b, 2);
});
