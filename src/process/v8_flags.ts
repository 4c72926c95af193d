/**
 * The V8 flags svc runs with: `deno task start`, `deno task dev`, `deno task compile` (baked into
 * the binary), the container's entrypoint and the bench all pass them. V8 reads them when the
 * process starts: set later from main.ts (`node:v8` setFlagsFromString) they change neither the
 * running heap nor a worker's (measured), so a plain `deno run -A main.ts` runs with V8's own
 * sizing unless started with `--v8-flags=…` or `DENO_V8_FLAGS`. See docs/performance.md
 * ("Memory") and docs/operations.md.
 *
 * @module
 */

/**
 * `--max-semi-space-size=2`: the young generation's semi-spaces capped at 2 MiB (V8 grows them
 * to 16–32 MiB under load). Peak RSS over the whole bench with one worker drops from 201–298 to
 * ≈ 130–155 MiB at no CPU cost measurable per request. Applies to every worker's heap.
 */
export const DEFAULT_V8_FLAGS: readonly string[] = ["--max-semi-space-size=2"];

/** {@link DEFAULT_V8_FLAGS} as one `deno run` / `deno compile` argument. */
export const DEFAULT_V8_FLAGS_ARG: string = `--v8-flags=${DEFAULT_V8_FLAGS.join(",")}`;
