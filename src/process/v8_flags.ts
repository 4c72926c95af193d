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
 * - `--max-semi-space-size=4`: the young generation's semi-spaces capped at 4 MiB (V8 grows them
 *   to 16–32 MiB under load). 2 MiB saved no measurable RSS over the bench's cases (peaks 136
 *   against 137 MiB) but scavenged twice as often, at 50 in-flight requests mostly copying their
 *   live state: 4 MiB with the flag below cut svc's CPU per primary-key read at 50 connections by
 *   ×0.88 (6 alternating rounds), see docs/performance.md ("V8 flags").
 * - `--no-parallel-scavenge`: scavenges run on the thread that allocates. On a machine whose cores
 *   PostgreSQL and the load share, V8's helper threads cost more CPU than they save in pause
 *   (alone ×0.93–0.95 of svc's CPU per request, same measurement); a pause of a 4 MiB semi-space
 *   stays around a millisecond.
 * - `--heap-growing-percent=200`: after a mark-compact the old generation may grow to 3× what
 *   survived before the next one (V8's own factor reaches 4× for a heap of svc's size: ≈ 17 MiB
 *   live became ≈ 68 MiB of mostly promoted garbage). Peak RSS of a one-worker svc through the
 *   primary-key read and the nested write at 1/10/50 connections: 137 → 120 and 151 → 132 MiB,
 *   svc CPU per request unchanged (median ratio 1.01 and 1.00 over 16 alternating rounds).
 *   `=100` saves ≈ 15 MiB more but measured 10–23% more CPU per request: not the default.
 *
 * Both apply to every worker's heap. See docs/performance.md ("Memory").
 */
export const DEFAULT_V8_FLAGS: readonly string[] = [
  "--max-semi-space-size=4",
  "--heap-growing-percent=200",
  "--no-parallel-scavenge",
];

/** {@link DEFAULT_V8_FLAGS} as one `deno run` / `deno compile` argument. */
export const DEFAULT_V8_FLAGS_ARG: string = `--v8-flags=${DEFAULT_V8_FLAGS.join(",")}`;
