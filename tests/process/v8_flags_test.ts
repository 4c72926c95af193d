import assert from "node:assert/strict";
import { DEFAULT_V8_FLAGS, DEFAULT_V8_FLAGS_ARG } from "../../src/process/v8_flags.ts";

const root = new URL("../../", import.meta.url);
const text = (path: string) => Deno.readTextFileSync(new URL(path, root));

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
  const run = async (args: string[]) => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["eval", ...args, probe],
      // Only the flags under test (no DENO_V8_FLAGS of the caller's).
      clearEnv: true,
      env: Object.fromEntries(
        Object.entries(Deno.env.toObject()).filter(([k]) => k !== "DENO_V8_FLAGS"),
      ),
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    return Number(new TextDecoder().decode(out.stdout).trim()) / (1024 * 1024);
  };
  const semi = Number(
    DEFAULT_V8_FLAGS.find((f) => f.startsWith("--max-semi-space-size="))!
      .split("=")[1],
  );
  const capped = await run([DEFAULT_V8_FLAGS_ARG]);
  assert.ok(capped <= 4 * semi + 1, `new space ${capped} MiB with ${DEFAULT_V8_FLAGS_ARG}`);
});
