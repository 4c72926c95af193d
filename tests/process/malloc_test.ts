/**
 * svc fixes glibc's mmap threshold at start-up (src/process/malloc.ts): large array buffers
 * (answer chunks, grown row buffers) get pages of their own, returned when freed, instead of being
 * carved from a heap that a freed block in its middle keeps large. Measured with glibc's own
 * figures (mallinfo2) in a process of its own, without and with the tuning.
 */
import assert from "node:assert/strict";
import { MMAP_THRESHOLD } from "../../src/process/malloc.ts";
import { runProbe } from "../helpers/probe.ts";

const PROBE = new URL("../fixtures/malloc_probe.ts", import.meta.url).pathname;

async function probe(mode: "tuned" | "untuned", env: Record<string, string> = {}) {
  const { text, result } = await runProbe<{
    tuning: { applied: boolean; reason?: string } | null;
    mapped: number;
    heap: number;
    during: number;
    freed: number;
    later: number;
  }>(PROBE, [mode], {
    denoArgs: ["--v8-flags=--expose-gc"],
    clearEnv: true,
    env: {
      ...Object.fromEntries(
        Object.entries(Deno.env.toObject()).filter(([k]) => !k.startsWith("MALLOC_")),
      ),
      ...env,
    },
  });
  return { text, ...result };
}

const glibc = Deno.build.os === "linux" && Deno.build.env === "gnu";

Deno.test({
  name: "after a large buffer was freed, 256 KiB buffers come from the heap unless tuned",
  ignore: !glibc,
  fn: async () => {
    assert.ok(256 * 1024 >= MMAP_THRESHOLD);
    // glibc's own sizing: the freed 8 MiB block raised the threshold, the 16 MiB go to the heap.
    const untuned = await probe("untuned");
    assert.ok(untuned.heap >= 12 && untuned.mapped < 4, untuned.text);
    // svc's tuning: each buffer is mapped on its own, the heap does not grow for them.
    const tuned = await probe("tuned");
    assert.deepEqual(tuned.tuning, { applied: true }, tuned.text);
    assert.ok(tuned.mapped >= 15 && tuned.heap < 4, tuned.text);
  },
});

Deno.test({
  name: "free pages a burst of small buffers left inside the heap are given back when tuned",
  ignore: !glibc,
  fn: async () => {
    // 48 MiB of 60 KB buffers (under the mmap threshold: from the heap), freed in place: glibc
    // keeps the pages (small buffers kept between them hold the heap's top). This is the control
    // (glibc's behaviour, not svc's): once in a full parallel suite the untuned process gave most
    // pages back on its own, so it gets three tries to show the behaviour the tuning fixes.
    let untuned = await probe("untuned");
    for (let i = 0; i < 2 && !(untuned.later > untuned.during - 10); i++) {
      untuned = await probe("untuned");
    }
    assert.ok(untuned.later > untuned.during - 10, untuned.text);
    // Tuned: malloc_trim every second gives them back.
    const tuned = await probe("tuned");
    assert.ok(tuned.later < tuned.during - 30, tuned.text);
  },
});

Deno.test({
  name: "glibc's thresholds set in the environment win over svc's tuning",
  ignore: !glibc,
  fn: async () => {
    const r = await probe("tuned", { MALLOC_MMAP_THRESHOLD_: String(32 << 20) });
    assert.deepEqual(r.tuning, { applied: false, reason: "set by the environment" }, r.text);
    // The environment's 32 MiB threshold: the 16 MiB come from the heap, none is mapped apart.
    assert.ok(r.mapped < 4, r.text);
  },
});

Deno.test("svc tunes malloc at start-up, before it serves", () => {
  const main = Deno.readTextFileSync(new URL("../../main.ts", import.meta.url));
  const call = main.indexOf("tuneMalloc();");
  assert.ok(call > 0, "main.ts calls tuneMalloc()");
  assert.ok(call < main.indexOf("running = await launch(cfg)"), "before launching the server");
});
