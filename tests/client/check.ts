/**
 * Runs `deno check` on a TypeScript file next to a generated database.ts, so type tests can
 * both pass and fail for real.
 */

/** The typed-query file (imports ./database.ts), kept as text so the repo's own check skips it. */
export const TYPED_QUERIES: string = Deno.readTextFileSync(
  new URL("./typed_queries.ts.in", import.meta.url),
);

/** Writes `source` as `typed_queries.ts` into `dir` (beside database.ts) and runs deno check. */
export async function checkTypes(
  dir: string,
  source: string,
  file = "typed_queries.ts",
): Promise<{ success: boolean; output: string; ms: number }> {
  await Deno.writeTextFile(`${dir}/${file}`, source);
  const t0 = performance.now();
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["check", "--quiet", "--no-config", `${dir}/${file}`],
    cwd: dir,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  const dec = new TextDecoder();
  return {
    success: out.success,
    output: dec.decode(out.stdout) + dec.decode(out.stderr),
    ms: performance.now() - t0,
  };
}
