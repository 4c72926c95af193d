/**
 * Which environment variables are configuration: `SVC_CONFIG` (the file) and `SVC_` names holding
 * `__` (`SVC_PG__POOL_SIZE` is `pg.pool_size`). Other `SVC_` names are ignored: those svc and its
 * tools read on purpose ({@link OWN_ENV}) and those container platforms inject for a service
 * named svc (`SVC_PORT=tcp://…`, `SVC_SERVICE_HOST`, …) are logged at debug; any other is most
 * likely a misspelled key (`SVC_PG_URI` for `SVC_PG__URI`) and is warned about at start
 * ({@link suspiciousEnv}).
 */
import { matchKey } from "./keys.ts";

/** Whether an environment variable is a configuration entry (other than SVC_CONFIG). */
export function isConfigEnv(name: string): boolean {
  return name.startsWith("SVC_") && name !== "SVC_CONFIG" && name.slice(4).includes("__");
}

/** `SVC_` variables that are not configuration and are ignored. */
export function ignoredEnv(env: Record<string, string>): string[] {
  return Object.keys(env).filter((n) =>
    n.startsWith("SVC_") && n !== "SVC_CONFIG" && !isConfigEnv(n)
  ).sort();
}

/**
 * `SVC_` variables that are no configuration keys but are read on purpose: by `deno task dev`
 * (SVC_DEV_DIR), by `reload.cmd` (SVC_RELOAD_REASON, set by svc), by the memory probe
 * (scripts/mem_probe.ts) and by the tests (`SVC_REQUIRE_…` too, see {@link isOwnEnv}).
 */
export const OWN_ENV: ReadonlySet<string> = new Set([
  "SVC_DEV_DIR",
  "SVC_RELOAD_REASON",
  "SVC_MEM_LOG",
  "SVC_MEM_INTERVAL_MS",
  "SVC_CHROMIUM",
  "SVC_UPDATE_SCREENSHOTS",
  "SVC_DEMO_SCREENSHOT",
  "SVC_TEST_CRASHED",
]);

/** Whether svc, its tasks or its tests read `name` on purpose. */
export function isOwnEnv(name: string): boolean {
  return OWN_ENV.has(name) || name.startsWith("SVC_REQUIRE_");
}

/**
 * Whether `name=value` looks injected by a container platform for a service or linked container
 * whose name starts with svc: Kubernetes' `<SVC>_SERVICE_HOST`, `<SVC>_SERVICE_PORT[_<port name>]`,
 * `<SVC>_PORT=tcp://…`, `<SVC>_PORT_<n>_TCP[_PROTO|_PORT|_ADDR]`; Docker links' `<SVC>_NAME=/…` and
 * `<SVC>_ENV_…`.
 */
export function isPlatformEnv(name: string, value: string): boolean {
  return /_SERVICE_(HOST|PORT)(_\w+)?$/.test(name) ||
    /_PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?$/.test(name) ||
    (/_PORT$/.test(name) && /^(tcp|udp|sctp):\/\//.test(value)) ||
    (/_NAME$/.test(name) && value.startsWith("/")) ||
    /^SVC_(\w+_)?ENV_/.test(name);
}

/** An ignored `SVC_` variable that looks meant as configuration. */
export interface SuspiciousEnv {
  name: string;
  /** The configuration key it most likely means (`pg.uri`), when one matches. */
  key?: string;
  /** The key's environment spelling (`SVC_PG__URI`), when it has one. */
  suggestion?: string;
}

/**
 * The ignored `SVC_` variables of `env` that svc does not read on purpose and no platform
 * injected: most likely misspelled configuration (`SVC_PG_URI`), with the key each one means when
 * reading some of its `_` as `.` makes one.
 */
export function suspiciousEnv(env: Record<string, string>): SuspiciousEnv[] {
  const out: SuspiciousEnv[] = [];
  for (const name of ignoredEnv(env)) {
    if (isOwnEnv(name) || isPlatformEnv(name, env[name])) continue;
    const key = keyOfEnv(name);
    if (key === undefined) out.push({ name });
    else if (!key.includes(".")) out.push({ name, key }); // `dev`: a flag or the file only
    else out.push({ name, key, suggestion: `SVC_${key.toUpperCase().replaceAll(".", "__")}` });
  }
  return out;
}

/**
 * The configuration key an `SVC_` name written with single `_` means: the known key that some
 * choice of its `_` as `.` spells, a key without `<placeholder>` segments first, then the one with
 * the fewest; undefined when none does.
 */
export function keyOfEnv(name: string): string | undefined {
  const words = name.slice(4).toLowerCase().split("_");
  if (words.some((w) => w === "") || words.length > 16) return undefined;
  let best: { key: string; captures: number } | undefined;
  for (let mask = 0; mask < 1 << (words.length - 1); mask++) {
    let key = words[0];
    for (let i = 1; i < words.length; i++) key += (mask & (1 << (i - 1)) ? "." : "_") + words[i];
    const m = matchKey(key);
    if (m && (best === undefined || m.captures.length < best.captures)) {
      best = { key, captures: m.captures.length };
    }
  }
  return best?.key;
}
