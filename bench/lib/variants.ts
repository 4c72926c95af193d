/**
 * The `--variant=NAME[@MAIN]:FLAG,FLAG…` syntax of the bench's comparison tools (pk_cpu.ts,
 * write_after_read.ts, mem.ts): a name, another checkout's main.ts, svc flags, and upper-case
 * `NAME=value` entries as environment variables (a `;` in such a value stands for a comma, e.g.
 * `DENO_V8_FLAGS=--max-semi-space-size=2;--single-threaded-gc`).
 */
import { type Child, startSvc } from "./procs.ts";
import { WELLKNOWN_FILE } from "./cases.ts";

/** One svc configuration under test. */
export interface Variant {
  name: string;
  /** Another checkout's main.ts (unset: this one). */
  main?: string;
  flags: string[];
  env: Record<string, string>;
}

/** Parses `NAME[@MAIN]:FLAG,FLAG…`. */
export function parseVariant(spec: string): Variant {
  const colon = spec.indexOf(":");
  const head = colon < 0 ? spec : spec.slice(0, colon);
  const rest = colon < 0 ? "" : spec.slice(colon + 1);
  const [name, main] = head.split("@");
  if (!name) throw new Error(`--variant ${spec}: a name is required`);
  const all = rest.split(",").filter(Boolean);
  const isEnv = (f: string) => /^[A-Z_][A-Z0-9_]*=/.test(f);
  const env = Object.fromEntries(
    all.filter(isEnv).map((f) => {
      const i = f.indexOf("=");
      return [f.slice(0, i), f.slice(i + 1).replaceAll(";", ",")];
    }),
  );
  return { name, main: main || undefined, flags: all.filter((f) => !isEnv(f)), env };
}

/** Where and how the bench tools start a {@link Variant}. */
export interface VariantStart {
  pgUri: string;
  poolSize: number;
  /** The tool's temp directory: its `wellknown` and `secrets` folders, `svc-<name>.log`. */
  tmp: string;
  /** Flags before the variant's own (e.g. `--http.workers=1`). */
  flags?: string[];
  /** Extra `deno run` options (e.g. `--cpu-prof`). */
  denoArgs?: string[];
}

/** Starts svc as variant `v`: its main.ts, flags and environment. */
export function startVariant(v: Variant, o: VariantStart): Promise<Child> {
  return startSvc({
    pgUri: o.pgUri,
    poolSize: o.poolSize,
    wellknownDir: `${o.tmp}/wellknown`,
    secretsDir: `${o.tmp}/secrets`,
    logFile: `${o.tmp}/svc-${v.name}.log`,
    flags: [...(o.flags ?? []), ...v.flags],
    main: v.main,
    env: v.env,
    denoArgs: o.denoArgs,
  });
}

/**
 * Makes a comparison tool's temp directory: its `wellknown` folder holding the `wellknown` case's
 * query (bench/lib/cases.ts) and an empty `secrets` folder, as {@link startVariant} expects.
 */
export async function toolDir(prefix: string): Promise<string> {
  const tmp = await Deno.makeTempDir({ prefix });
  Deno.mkdirSync(`${tmp}/wellknown`);
  Deno.mkdirSync(`${tmp}/secrets`);
  Deno.writeTextFileSync(
    `${tmp}/wellknown/${WELLKNOWN_FILE.name}.json`,
    JSON.stringify(WELLKNOWN_FILE),
  );
  return tmp;
}
