/**
 * The fuzz properties, shared by the bounded test (tests/reliability/fuzz_test.ts) and the long
 * mode (`deno task soak --fuzz N`). Seeded and reproducible: `FUZZ_SEED` fixes the seed,
 * `FUZZ_RUNS` the total number of cases; a failure names the seed and the counterexample path.
 */
import fc from "fast-check";
import process from "node:process";
import { ConfigError, loadConfig } from "../../src/config/load.ts";
import { chinookDb, schemaOf } from "../helpers/db.ts";
import { Arbs, cookieHeader, hostileString, routeCall } from "./arbitraries.ts";
import { type Req, send, type Tally } from "./invariants.ts";
import { catalogTypeNames, type Target } from "./target.ts";

/** Share of the total runs each property gets. */
export const SHARES: Record<string, number> = {
  "POST /svc read trees": 0.2,
  "casts to every type": 0.05,
  "GET /svc query strings": 0.15,
  "write payloads": 0.15,
  "well-known calls": 0.1,
  "cookie headers": 0.1,
  "declared routes": 0.15,
  "config files": 0.1,
};

/**
 * The seed and run count from the environment (`FUZZ_SEED`, `FUZZ_RUNS`), else the defaults (a
 * random seed when none is given).
 */
export function fuzzSettings(
  defaultRuns: number,
  defaultSeed?: number,
): { seed: number; runs: number } {
  const s = Deno.env.get("FUZZ_SEED");
  const r = Deno.env.get("FUZZ_RUNS");
  return {
    seed: s ? Number(s) : defaultSeed ?? (Date.now() ^ (Math.random() * 0x7fffffff)) | 0,
    runs: r ? Number(r) : defaultRuns,
  };
}

/** One named property over HTTP (or over loadConfig). */
export interface FuzzProperty {
  name: string;
  run(numRuns: number, seed: number): Promise<void>;
}

/** Runs `prop` with fast-check; a failure's message carries how to reproduce it. */
async function check<T>(
  name: string,
  arb: fc.Arbitrary<T>,
  predicate: (t: T) => Promise<void>,
  numRuns: number,
  seed: number,
): Promise<void> {
  const out = await fc.check(fc.asyncProperty(arb, predicate), {
    numRuns,
    seed,
    endOnFailure: true,
  });
  if (out.failed) {
    throw new Error(
      `fuzz property "${name}" failed; reproduce with FUZZ_SEED=${seed} (fast-check path ` +
        `${out.counterexamplePath})\n${fc.defaultReportMessage(out)}\n${
          (out.errorInstance as Error)?.message ?? out.errorInstance
        }`,
    );
  }
}

const CONFIG_SAMPLES: [string, string][] = [
  ["toml", `[http]\nport = 1111\n[pg.query]\nanonymous_role = "r"\nmax_depth = 3\n`],
  ["yaml", `http:\n  port: 1111\npg:\n  query:\n    anonymous_role: r\n    max_depth: 3\n`],
  ["huml", `http::\n  port: 1111\npg::\n  query::\n    anonymous_role: "r"\n    max_depth: 3\n`],
  ["toml", `[jwt]\nalgorithm = "HS512"\nmax_age = 60\n[route.rt.add]\npath = "/x/{a}"\n`],
  ["yaml", `logging:\n  level: warn\n  filter:\n    path: "^/svc"\nhttp:\n  cookies_max_age: 5\n`],
];

/** A config file: a sample with random character edits, or random text. */
const configText: fc.Arbitrary<[string, string]> = fc.oneof(
  fc.tuple(
    fc.constantFrom(...CONFIG_SAMPLES),
    fc.array(fc.tuple(fc.nat(), fc.nat(3), fc.oneof(hostileString, fc.string({ maxLength: 3 }))), {
      maxLength: 4,
    }),
  ).map(([[ext, text], edits]) => {
    let t = text;
    for (const [at, del, ins] of edits) {
      const i = at % (t.length + 1);
      t = t.slice(0, i) + ins + t.slice(i + del);
    }
    return [ext, t] as [string, string];
  }),
  fc.tuple(fc.constantFrom("toml", "yaml", "yml", "huml", "json"), fc.string({ maxLength: 60 })),
  fc.tuple(
    fc.constantFrom("toml", "yaml"),
    fc.dictionary(hostileString, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
  ).map(([ext, o]) => [ext, ext === "yaml" ? JSON.stringify(o) : toToml(o)] as [string, string]),
);

/** Runs `fn` without the YAML parser's process warnings about odd tags in fuzzed files. */
async function quietYaml<T>(fn: () => Promise<T>): Promise<T> {
  const saved = process.listeners("warning");
  process.removeAllListeners("warning");
  process.on("warning", () => {});
  try {
    return await fn();
  } finally {
    process.removeAllListeners("warning");
    for (const l of saved) process.on("warning", l);
  }
}

function toToml(o: Record<string, unknown>): string {
  return Object.entries(o).map(([k, v]) => `${JSON.stringify(k)} = ${JSON.stringify(v)}`).join(
    "\n",
  );
}

/**
 * The properties against a running target; `tally` counts every answer. `tolerateKnown` counts
 * the already-reported open issues (see `knownOpenIssue`) instead of failing on them.
 */
export async function properties(
  t: Target,
  tally: Tally,
  tolerateKnown = false,
): Promise<FuzzProperty[]> {
  const base = t.url;
  const arbs = new Arbs(await schemaOf(await chinookDb(t.db)), await catalogTypeNames(t.db));
  const validToken = t.userCookie.slice("accesstoken=".length);
  const wkNames = ["artist_albums", "tracks_by_genre", "top_customers", "invoice_lines"];
  const http = (name: string, arb: fc.Arbitrary<Req>): FuzzProperty => ({
    name,
    run: (n, seed) =>
      check(
        name,
        arb,
        async (req) => void await send(base, req, tally, tolerateKnown),
        n,
        seed,
      ),
  });
  const dir = await Deno.makeTempDir({ prefix: "svc-fuzz-cfg-" });
  return [
    http("POST /svc read trees", arbs.postRead(t.userCookie)),
    http("casts to every type", arbs.cast(t.userCookie)),
    http("GET /svc query strings", arbs.getQuery()),
    http("write payloads", arbs.write(t.userCookie)),
    http("well-known calls", arbs.wellknown(wkNames)),
    http("cookie headers", cookieHeader(validToken)),
    http("declared routes", routeCall(t.userCookie)),
    {
      name: "config files",
      run: (n, seed) =>
        quietYaml(() =>
          check(
            "config files",
            configText,
            async ([ext, text]) => {
              const path = `${dir}/c.${ext}`;
              await Deno.writeTextFile(path, text);
              try {
                loadConfig({ args: [`--config=${path}`], env: {} });
                tally.add(0, "CONFIG_OK");
              } catch (e) {
                if (!(e instanceof ConfigError)) {
                  throw new Error(`loadConfig threw ${(e as Error)?.stack ?? e} for:\n${text}`);
                }
                tally.add(0, "CONFIG_ERROR");
              }
            },
            n,
            seed,
          )
        ),
    },
  ];
}
