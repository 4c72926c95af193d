/**
 * Configuration loading: a file (TOML, YAML or HUML), environment variables `SVC_<SECTION>__<KEY>`
 * and flags `--<key>`; precedence flags > env > file > defaults. Every key is checked against the
 * key table (src/config/keys.ts); errors name the key, the source and what was expected.
 */
import { parse as parseToml } from "smol-toml";
import { loadYaml, parseYaml } from "../formats/yaml.ts";
import { parse as parseHuml } from "../formats/huml.ts";
import { isConfigEnv } from "./env.ts";
import {
  checkConfig,
  closestKey,
  type Config,
  describeKind,
  KEYS,
  matchKey,
  type SamlConfig,
} from "./keys.ts";
import { MIN_MAX_PARAMS, WIRE_MAX_PARAMS } from "../db/bind_limit.ts";
import { checkIssuerConfig } from "../auth/issuers.ts";
import { checkExposedConfig } from "../db/exposed.ts";
import { readUris, topologyProblem } from "../db/topology.ts";
import { resolveConfig, URI_ENCODING_HINT } from "../pg/config.ts";

/** A configuration error: the process exits with code 2 and prints the message. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

/** Where a value came from. */
export type Source = "default" | "file" | "env" | "flag";

export type { Config, OpenIdConfig, RouteConfig, SamlConfig } from "./keys.ts";

/** Raw inputs of a load; defaults to the process's own. */
export interface LoadInput {
  args?: string[];
  env?: Record<string, string>;
  /**
   * Defaults of a tool of its own that replace the key table's (dotted key → value), below the
   * file, the environment and the flags: `deno task token` looks for the dev server's secret.
   */
  defaults?: Record<string, unknown>;
}

type Flat = Map<string, { value: unknown; source: Source; where: string }>;

/** Flattens nested objects into dotted keys; arrays and scalars are leaves. */
export function flatten(
  obj: unknown,
  prefix = "",
  out: [string, unknown][] = [],
): [string, unknown][] {
  if (obj !== null && typeof obj === "object" && !Array.isArray(obj) && !(obj instanceof Date)) {
    for (const [k, v] of Object.entries(obj as Record<string, unknown>)) {
      flatten(v, prefix ? `${prefix}.${k}` : k, out);
    }
  } else if (prefix) out.push([prefix, obj]);
  return out;
}

/** Parses `--key=value`, `--key value` and bare `--flag` (true) arguments into dotted keys. */
export function parseFlags(args: string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (!a.startsWith("--") || a === "--") {
      throw new ConfigError(`unexpected argument "${a}" (flags are --<key>=<value>)`);
    }
    const body = a.slice(2);
    const eq = body.indexOf("=");
    if (eq >= 0) out.push([body.slice(0, eq), body.slice(eq + 1)]);
    else if (i + 1 < args.length && !args[i + 1].startsWith("--")) out.push([body, args[++i]]);
    else out.push([body, "true"]);
  }
  return out;
}

/** Reads and parses a config file by extension; errors carry file:line:column. */
export function parseConfigFile(path: string, text: string): unknown {
  const ext = path.toLowerCase().split(".").pop();
  try {
    if (ext === "toml") return parseToml(text);
    if (ext === "yaml" || ext === "yml") return parseYaml(text) ?? {};
    if (ext === "huml") return parseHuml(text);
  } catch (e) {
    const err = e as {
      line?: number;
      column?: number;
      linePos?: { line: number; col: number }[];
      message: string;
    };
    const line = err.line ?? err.linePos?.[0]?.line;
    const col = err.column ?? err.linePos?.[0]?.col;
    const loc = line !== undefined ? `:${line}:${col ?? 1}` : "";
    throw new ConfigError(
      `${path}${loc}: cannot parse ${ext?.toUpperCase()} config: ${err.message.split("\n")[0]}`,
    );
  }
  throw new ConfigError(
    `${path}: unknown config file extension (expected .toml, .yaml, .yml or .huml)`,
  );
}

function envToKey(name: string): string {
  return name.slice(4).split("__").join(".").toLowerCase();
}

/**
 * Loads configuration like `loadConfig`, first loading the YAML parser when the config file is
 * YAML (the parser is loaded lazily to keep start-up fast).
 */
export async function loadConfigAsync(input: LoadInput = {}): Promise<Config> {
  const args = input.args ?? Deno.args;
  const env = input.env ?? Deno.env.toObject();
  const path = parseFlags(args).find(([k]) => k === "config")?.[1] ?? env.SVC_CONFIG;
  if (path && /\.ya?ml$/i.test(path)) await loadYaml();
  return loadConfig({ ...input, args, env });
}

/**
 * Loads, merges and validates configuration. Throws ConfigError on any problem. A YAML config
 * file needs `loadYaml()` first (or use `loadConfigAsync`).
 */
export function loadConfig(input: LoadInput = {}): Config {
  const args = input.args ?? Deno.args;
  const env = input.env ?? Deno.env.toObject();
  const flat: Flat = new Map();
  const flags = parseFlags(args);
  const configPath = flags.find(([k]) => k === "config")?.[1] ?? env.SVC_CONFIG;
  if (configPath) {
    let text: string;
    try {
      text = Deno.readTextFileSync(configPath);
    } catch (e) {
      throw new ConfigError(`${configPath}: cannot read config file: ${(e as Error).message}`);
    }
    const data = parseConfigFile(configPath, text);
    if (data === null || typeof data !== "object" || Array.isArray(data)) {
      throw new ConfigError(`${configPath}: the config file must hold a table/dict at its root`);
    }
    for (const [k, v] of flatten(data)) {
      flat.set(k, { value: v, source: "file", where: configPath });
    }
  }
  for (const [name, value] of Object.entries(env)) {
    if (!isConfigEnv(name)) continue; // SVC_PORT=tcp://… from a container platform, …
    flat.set(envToKey(name), { value, source: "env", where: name });
  }
  for (const [k, v] of flags) flat.set(k, { value: v, source: "flag", where: `--${k}` });
  for (const [k, v] of Object.entries(input.defaults ?? {})) {
    if (!flat.has(k)) flat.set(k, { value: v, source: "default", where: "the tool's default" });
  }
  return build(flat);
}

function setPath(target: Record<string, unknown>, path: string[], value: unknown) {
  let o = target;
  for (const p of path.slice(0, -1)) {
    if (typeof o[p] !== "object" || o[p] === null) o[p] = {};
    o = o[p] as Record<string, unknown>;
  }
  o[path[path.length - 1]] = value;
}

function build(flat: Flat): Config {
  const out: Record<string, unknown> = {};
  const explicit = new Set<string>();
  for (const [key, { value, source, where }] of flat) {
    const m = matchKey(key);
    const at = source === "file"
      ? `in ${where}`
      : source === "env"
      ? `from environment ${where}`
      : source === "default"
      ? `(${where})`
      : `from flag ${where}`;
    if (!m) {
      const loc = source === "file" ? `in ${locateKey(where, key)}` : at;
      throw new ConfigError(
        `unknown configuration key "${key}" ${loc}; did you mean "${closestKey(key)}"?`,
      );
    }
    const parsed = m.spec.schema.safeParse(value);
    if (!parsed.success) {
      const loc = source === "file" ? `in ${locateKey(where, key)}` : at;
      throw new ConfigError(
        `invalid value for "${key}" ${loc}: expected ${describeKind(m.spec.kind)}, got ${
          JSON.stringify(value)
        }`,
      );
    }
    explicit.add(m.spec.key);
    setPath(out, key.split("."), parsed.data);
  }
  const dev = (out.dev as boolean | undefined) ?? false;
  // Defaults for fixed keys; patterned entries get theirs below.
  for (const spec of KEYS) {
    if (spec.key.includes("<") || explicit.has(spec.key) || spec.default === undefined) continue;
    setPath(out, spec.key.split("."), spec.default === "dev" ? dev : structuredClone(spec.default));
  }
  // Dev mode listens on loopback only, unless http.host is set.
  if (dev && !explicit.has("http.host")) setPath(out, ["http", "host"], "127.0.0.1");
  for (const prefix of ["route", "openid"]) {
    const entries = (out[prefix] ?? {}) as Record<string, unknown>;
    out[prefix] = entries;
    const depth = prefix === "route" ? 2 : 1;
    const walk = (o: Record<string, unknown>, d: number, names: string[]) => {
      for (const [k, v] of Object.entries(o)) {
        if (d > 1) walk(v as Record<string, unknown>, d - 1, [...names, k]);
        else {
          for (const spec of KEYS) {
            if (!spec.key.startsWith(`${prefix}.`) || spec.default === undefined) continue;
            const leaf = spec.key.split(".").pop()!;
            const entry = v as Record<string, unknown>;
            if (entry[leaf] === undefined) entry[leaf] = structuredClone(spec.default);
          }
        }
      }
    };
    walk(entries, depth, []);
  }
  const saml = (out.saml ??= {}) as Record<string, unknown>;
  for (const [name, v] of Object.entries(saml)) {
    if (name === "certificate_path" || name === "private_key_path") continue;
    const entry = v as Record<string, unknown>;
    for (const spec of KEYS) {
      if (!spec.key.startsWith("saml.<name>.") || spec.default === undefined) continue;
      const leaf = spec.key.split(".").pop()!;
      if (entry[leaf] === undefined) entry[leaf] = structuredClone(spec.default);
    }
    for (const [leaf, min] of [["metadata_refresh", 1], ["max_response_size", 1024]] as const) {
      if ((entry[leaf] as number) < min) {
        throw new ConfigError(`invalid value for "saml.${name}.${leaf}": expected at least ${min}`);
      }
    }
  }
  // Every group of keys exists, with nothing set in it or not (`http.upload`, `route`, …).
  for (const spec of KEYS) {
    const path = spec.key.split(".");
    const open = path.findIndex((p) => p.startsWith("<"));
    let o = out;
    for (const p of path.slice(0, open < 0 ? -1 : open)) {
      o[p] ??= {};
      o = o[p] as Record<string, unknown>;
    }
  }
  const store = (out.sso as { store?: string }).store;
  if (store !== undefined) {
    try {
      storeTable(store);
    } catch (e) {
      throw new ConfigError(`invalid value for "sso.store": ${(e as Error).message}`);
    }
  }
  let cfg: Config;
  try {
    cfg = checkConfig(out);
  } catch (e) {
    // Every value was checked against its key above: this is svc's own mistake.
    throw new ConfigError(`invalid configuration at ${(e as Error).message}`);
  }
  const granular = ["pg.host", "pg.port", "pg.database", "pg.user", "pg.password"].filter((k) =>
    explicit.has(k)
  );
  if (!cfg.jwt.secure && cfg.jwt.same_site === "None") {
    throw new ConfigError(
      "jwt.secure=false cannot be combined with jwt.same_site=None (browsers drop such a cookie)",
    );
  }
  if (cfg.pg.uri !== undefined && granular.length > 0) {
    throw new ConfigError(
      `pg.uri cannot be combined with ${
        granular.join(", ")
      }: give either the full connection string or the granular fields`,
    );
  }
  for (
    const [name, re] of [
      ["http.functions.allowed_auth", cfg.http.functions.allowed_auth],
      ...Object.entries(cfg.logging.filter).map(([k, v]) => [`logging.filter.${k}`, v]),
      ...Object.entries(cfg.logging.exclude).map(([k, v]) => [`logging.exclude.${k}`, v]),
    ] as [string, string | undefined][]
  ) {
    if (re === undefined) continue;
    try {
      new RegExp(re);
    } catch (e) {
      throw new ConfigError(
        `invalid value for "${name}": not a regular expression (${(e as Error).message})`,
      );
    }
  }
  for (const [schema, fns] of Object.entries(cfg.route)) {
    for (const [fn, r] of Object.entries(fns)) {
      if (!r.path) {
        throw new ConfigError(`route.${schema}.${fn}.path is required to declare a route`);
      }
      if (r.path.startsWith("/auth/") || r.path === "/auth") {
        throw new ConfigError(`route.${schema}.${fn}.path: the prefix /auth/ is reserved`);
      }
      if (r.path === "/svc" || r.path.startsWith("/svc/")) {
        throw new ConfigError(`route.${schema}.${fn}.path: the path /svc is reserved`);
      }
    }
  }
  cfg.pg.read_uri = readUris(cfg.pg.read_uri);
  // Connection strings are checked now, not at the first connection (which retries for ever).
  for (
    const [name, uri] of [
      ["pg.uri", cfg.pg.uri],
      ["pg.listen_uri", cfg.pg.listen_uri],
      ...(cfg.pg.read_uri ?? []).map((u) => ["pg.read_uri", u]),
    ] as [string, string | undefined][]
  ) {
    if (uri === undefined) continue;
    try {
      resolveConfig(uri);
    } catch (e) {
      const message = (e as Error).message;
      // pg.uri has another spelling that takes a password as it is.
      const granular = name === "pg.uri" && message.includes(URI_ENCODING_HINT)
        ? "; or leave pg.uri unset and give pg.host, pg.port, pg.user, pg.password and " +
          "pg.database (taken as they are)"
        : "";
      throw new ConfigError(`invalid value for "${name}": ${message}${granular}`);
    }
  }
  const topology = topologyProblem(cfg.pg);
  if (topology) throw new ConfigError(topology);
  const maxParams = cfg.pg.query.max_params;
  if (!(maxParams >= MIN_MAX_PARAMS && maxParams <= WIRE_MAX_PARAMS)) {
    throw new ConfigError(
      `invalid value for "pg.query.max_params": expected ${MIN_MAX_PARAMS} to ${WIRE_MAX_PARAMS}, got ${maxParams}`,
    );
  }
  if (!(cfg.pg.lease_grace >= 0)) {
    throw new ConfigError(
      `invalid value for "pg.lease_grace": expected seconds (0 or more), got ${cfg.pg.lease_grace}`,
    );
  }
  if (!(cfg.pg.max_lifetime >= 0)) {
    throw new ConfigError(
      `invalid value for "pg.max_lifetime": expected seconds (0 or more), got ${cfg.pg.max_lifetime}`,
    );
  }
  for (const [name, o] of Object.entries(cfg.openid)) {
    if (!o.issuer) throw new ConfigError(`openid.${name}.issuer is required`);
  }
  // External issuers and exposed schemas (src/auth/issuers.ts, src/db/exposed.ts).
  const problem = checkIssuerConfig(cfg.jwt) ?? checkExposedConfig(cfg);
  if (problem !== null) throw new ConfigError(problem);
  return cfg;
}

/**
 * How many HTTP workers to run: `http.workers`, else one per core the process may use
 * (`navigator.hardwareConcurrency`, which follows CPU affinity), 1 in dev mode; never more than
 * `pg.pool_size` (each worker needs a connection of its own). Throws ConfigError below 1.
 */
export function workerCount(cfg: Config): number {
  const asked = cfg.http.workers ?? (cfg.dev ? 1 : navigator.hardwareConcurrency || 1);
  if (!Number.isInteger(asked) || asked < 1) {
    throw new ConfigError(`invalid value for "http.workers": expected at least 1, got ${asked}`);
  }
  return Math.max(1, Math.min(asked, cfg.pg.pool_size));
}

/**
 * `sso.store` (`schema.table` or `table`) as a quoted SQL name; throws on an unusable name. A
 * bare table name is qualified by nothing (the connection's search_path decides).
 */
export function storeTable(name: string): string {
  const parts = name.split(".");
  if (
    parts.length > 2 ||
    parts.some((p) => p === "" || p.length > 63 || p.includes("\0") || p !== p.trim())
  ) {
    throw new Error(`expected schema.table, got ${JSON.stringify(name)}`);
  }
  return parts.map((p) => `"${p.replaceAll('"', '""')}"`).join(".");
}

/**
 * The `saml.<name>` entries (the `saml` section also holds `certificate_path` and
 * `private_key_path`, which are no entries).
 */
export function samlEntries(cfg: Config): [string, SamlConfig][] {
  return Object.entries(cfg.saml).filter(([name]) =>
    name !== "certificate_path" && name !== "private_key_path"
  ) as [string, SamlConfig][];
}

/**
 * The SP certificate and private key search lists of a SAML entry: its own, else the section's,
 * else `<secrets.dir>/saml.crt` and `<secrets.dir>/saml.key`.
 */
export function samlKeyPaths(
  cfg: Config,
  entry: { certificate_path?: string; private_key_path?: string },
): { certificate: string; privateKey: string } {
  const dir = cfg.secrets.dir.replace(/\/+$/, "") || "/";
  return {
    certificate: entry.certificate_path ?? cfg.saml.certificate_path ?? `${dir}/saml.crt`,
    privateKey: entry.private_key_path ?? cfg.saml.private_key_path ?? `${dir}/saml.key`,
  };
}

/** The connection string to use: pg.uri, or one built from the granular fields. */
export function connectionString(cfg: Config): string {
  if (cfg.pg.uri) return cfg.pg.uri;
  const u = new URL("postgres://localhost");
  u.hostname = cfg.pg.host;
  u.port = String(cfg.pg.port);
  if (cfg.pg.user) u.username = encodeURIComponent(cfg.pg.user);
  if (cfg.pg.password) u.password = encodeURIComponent(cfg.pg.password);
  u.pathname = `/${encodeURIComponent(cfg.pg.database ?? cfg.pg.user ?? "postgres")}`;
  return u.toString();
}

/**
 * `file:line:column` of a key in a config file (the line where its last segment is assigned, after
 * the lines of its parent segments when they appear), or just the file when it cannot be found.
 */
export function locateKey(path: string, key: string): string {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch {
    return path;
  }
  const lines = text.split(/\r?\n/);
  const segs = key.split(".");
  const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const leaf = segs[segs.length - 1];
  // A dotted key on one line (toml `pg.pool_size = …`), else the leaf alone (`pool_size = …`,
  // `pool_size: …`), searched after the last line naming a parent segment.
  const dotted = new RegExp(`^\\s*["']?${esc(key)}["']?\\s*[=:]`);
  let from = 0;
  for (const s of segs.slice(0, -1)) {
    const re = new RegExp(`(^|[\\s.\\[\"'])${esc(s)}(["'\\]\\s.=:]|$)`);
    const i = lines.findIndex((l, n) => n >= from && re.test(l));
    if (i >= 0) from = i;
  }
  const plain = new RegExp(`^(\\s*)["']?${esc(leaf)}["']?\\s*[=:]`);
  for (let i = 0; i < lines.length; i++) {
    if (dotted.test(lines[i])) return `${path}:${i + 1}:${lines[i].search(/\S/) + 1}`;
  }
  for (let i = from; i < lines.length; i++) {
    const m = plain.exec(lines[i]);
    if (m) return `${path}:${i + 1}:${m[1].length + 1}`;
  }
  return path;
}
