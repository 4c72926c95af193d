import assert from "node:assert/strict";
import { DEFAULT_V8_FLAGS, DEFAULT_V8_FLAGS_ARG } from "../../src/process/v8_flags.ts";

const root = new URL("../../", import.meta.url);
const text = (path: string) => Deno.readTextFileSync(new URL(path, root));

/**
 * Runs `probe` with `deno eval` under exactly `flags` (the caller's DENO_V8_FLAGS removed) and
 * returns the first number it prints, in MiB.
 */
async function evalMiB(flags: readonly string[], probe: string): Promise<number> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", `--v8-flags=${flags.join(",")}`, probe],
    clearEnv: true,
    env: Object.fromEntries(
      Object.entries(Deno.env.toObject()).filter(([k]) => k !== "DENO_V8_FLAGS"),
    ),
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  return Number(new TextDecoder().decode(out.stdout).trim().split(" ")[0]) / (1024 * 1024);
}

Deno.test("every way to start svc passes its default V8 flags", () => {
  const tasks = JSON.parse(text("deno.json")).tasks as Record<string, { command: string }>;
  for (const name of ["start", "compile"]) {
    const cmd = tasks[name].command;
    assert.ok(cmd.includes(` ${DEFAULT_V8_FLAGS_ARG} `), `deno task ${name}: ${cmd}`);
  }
  const entry = text("Dockerfile").split("\n").find((l) => l.startsWith("ENTRYPOINT"));
  assert.ok(entry?.includes(`"${DEFAULT_V8_FLAGS_ARG}"`), `Dockerfile: ${entry}`);
  // `deno task dev` runs svc from scripts/dev.ts; the bench from bench/lib/procs.ts.
  for (const file of ["scripts/dev.ts", "bench/lib/procs.ts"]) {
    assert.match(text(file), /\bDEFAULT_V8_FLAGS_ARG\b/, file);
  }
});

Deno.test("the default V8 flags are V8's and cap the young generation", async () => {
  // An unknown flag makes deno exit 1; the new space is two semi-spaces (plus V8's own slack),
  // 64 MiB under this load with V8's sizing.
  const probe = `
    import * as v8 from "node:v8";
    let keep = [], max = 0;
    for (let i = 0; i < 1_000_000; i++) {
      keep.push({ i, s: "x" + i });
      if (keep.length > 20000) keep = [];
      if (i % 10000 === 0) {
        const s = v8.getHeapSpaceStatistics().find((x) => x.space_name === "new_space");
        max = Math.max(max, s.space_size);
      }
    }
    console.log(max);`;
  const semi = Number(
    DEFAULT_V8_FLAGS.find((f) => f.startsWith("--max-semi-space-size="))!
      .split("=")[1],
  );
  const capped = await evalMiB(DEFAULT_V8_FLAGS, probe);
  assert.ok(capped <= 4 * semi + 1, `new space ${capped} MiB with ${DEFAULT_V8_FLAGS_ARG}`);
});

Deno.test("the default V8 flags keep the old generation's promoted garbage smaller", async () => {
  // A live set that stays, and objects that live long enough to be promoted, then die: the old
  // generation grows with promoted garbage until a mark-compact. svc's default flags bound that
  // growth more tightly than V8's own factor (≈ 4× what survived, for a heap of this size).
  const probe = `
    import * as v8 from "node:v8";
    const live = [];
    for (let i = 0; i < 200000; i++) live.push({ i, s: "live" + i });
    const ring = new Array(30000).fill(null);
    let max = 0;
    for (let i = 0; i < 3000000; i++) {
      ring[i % ring.length] = { i, s: "x" + i, a: [i, i] };
      if (i % 5000 === 0) {
        const s = v8.getHeapSpaceStatistics().find((x) => x.space_name === "old_space");
        max = Math.max(max, s.space_used_size);
      }
    }
    console.log(max, live.length);`;
  const youngOnly = DEFAULT_V8_FLAGS.filter((f) => f.startsWith("--max-semi-space-size="));
  const [withDefaults, v8Growth] = [
    await evalMiB(DEFAULT_V8_FLAGS, probe),
    await evalMiB(youngOnly, probe),
  ];
  assert.ok(
    withDefaults < 0.9 * v8Growth,
    `old space peak ${withDefaults.toFixed(1)} MiB with ${DEFAULT_V8_FLAGS_ARG}, ` +
      `${v8Growth.toFixed(1)} MiB with ${youngOnly.join(",")} alone`,
  );
});
