/**
 * Runs a fixture probe (a script under tests/fixtures) in a process of its own, so that what it
 * measures (memory, glibc's heap) is its own and not the test runner's, which runs other test
 * files beside it under `--parallel`.
 */
import assert from "node:assert/strict";

/** How to run a probe: `deno run` options before the script, and its environment. */
export interface ProbeOptions {
  denoArgs?: string[];
  env?: Record<string, string>;
  /** Start from an empty environment (only `env`). */
  clearEnv?: boolean;
}

/**
 * Runs `deno run -A [denoArgs] <path> <args>`; asserts it exited 0 (its stderr as the message) and
 * returns its standard output and its last line parsed as JSON.
 */
export async function runProbe<T>(
  path: string,
  args: string[],
  opts: ProbeOptions = {},
): Promise<{ text: string; result: T }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ...(opts.denoArgs ?? []), path, ...args],
    clearEnv: opts.clearEnv,
    env: opts.env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const text = new TextDecoder().decode(out.stdout).trim();
  return { text, result: JSON.parse(text.split("\n").at(-1)!) as T };
}
