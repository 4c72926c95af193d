/**
 * Well-known queries: named, parameterized queries loaded from files and compiled once at load
 * (docs/query.md "Well-known queries"; loading and deactivation: docs/endpoint.md).
 *
 * `pg.query.wellknown_path` is a colon-separated list of directories searched recursively for
 * `.json`, `.yml`, `.yaml` and `.huml` files. Files and directories whose names start with `_`
 * are skipped (so are hidden ones, starting with `.`). A file holds one definition or an array
 * of them:
 *
 * ```json
 * {"name": "artist_albums",
 *  "description": "optional, ignored",
 *  "params": {"artist_id": {"type": "integer"}, "genre": {"type": "string", "default": null}},
 *  "query": {"relation": "artist", "where": ["=", "artist_id", ["$param", "artist_id", "integer"]]}}
 * ```
 *
 * Fields of a definition: `name` (non-empty string), `params` (optional: param name, matching
 * `[A-Za-z_][A-Za-z0-9_]*`, → `{type, default?, description?}`, `type` one of
 * {@link PARAM_TYPES}, a non-null `default` must match the type), `query` (a Relation, compiled
 * with `["$param", name, cast?]` allowed; the cast defaults to jsonb), `description` (optional
 * string). Any other field is a definition error.
 *
 * Loading never fails: a name declared by two definitions deactivates every query of that name,
 * and any other definition error (unparsable file, bad field, unknown param type, a query that
 * does not compile against the schema) deactivates that query, or every query of the file when
 * the file itself is unusable. Each case yields a {@link LoadWarning}; the caller logs them.
 *
 * @module
 */
import { parseJsonExact } from "../formats/json.ts";
import { loadYaml, parseYaml } from "../formats/yaml.ts";
import { parse as parseHuml } from "../formats/huml.ts";
import { parseQuery } from "../compile/parse.ts";
import type { Schema } from "../db/schema.ts";
import { SvcError } from "../svc_error.ts";
import { isParamType, matchesType, PARAM_TYPES, type ParamDef, type WellKnown } from "./params.ts";

export { decodeGetParam, type ParamDef, resolveParams, type WellKnown } from "./params.ts";

/** A problem found while loading; the queries concerned are deactivated. */
export interface LoadWarning {
  /** The query name concerned, or null when unknown (unparsable file, missing name, directory). */
  name: string | null;
  /** The files (or path entries) concerned: all declaring files for a duplicate name. */
  files: string[];
  /** Human-readable description, naming the file(s) and the problem. */
  message: string;
}

/** The well-known queries of one load (startup or reload); immutable once built. */
export class Registry {
  readonly #queries: Map<string, WellKnown>;
  /** Problems found while loading (each one deactivated a query, a file or skipped a directory). */
  readonly warnings: LoadWarning[];

  /** A registry of the given (valid, uniquely named) queries; empty by default. */
  constructor(queries: Iterable<WellKnown> = [], warnings: LoadWarning[] = []) {
    this.#queries = new Map([...queries].map((q) => [q.name, q]));
    this.warnings = warnings;
  }

  /**
   * The registered query of that name. Throws SvcError WELL_KNOWN_UNKNOWN_QUERY when the name
   * was never registered or was deactivated (the two cases are indistinguishable).
   */
  get(name: string): WellKnown {
    const q = typeof name === "string" ? this.#queries.get(name) : undefined;
    if (!q) {
      throw new SvcError(
        "WELL_KNOWN_UNKNOWN_QUERY",
        `unknown well-known query ${JSON.stringify(name)}`,
      );
    }
    return q;
  }

  /** Whether a query of that name is registered. */
  has(name: string): boolean {
    return this.#queries.has(name);
  }

  /** Every registered query's name and params, sorted by name (for database.json and typings). */
  list(): { name: string; params: Record<string, ParamDef> }[] {
    return [...this.#queries.values()]
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map((q) => ({ name: q.name, params: q.params }));
  }

  /** Every registered query (to hand the registry to another worker). */
  queries(): WellKnown[] {
    return [...this.#queries.values()];
  }

  /** Number of registered queries. */
  get size(): number {
    return this.#queries.size;
  }
}

/** File extensions of definition files, with their parsers. */
const PARSERS: Record<string, (text: string) => unknown> = {
  ".json": (t) => parseJsonExact(t),
  ".yml": (t) => parseYaml(t),
  ".yaml": (t) => parseYaml(t),
  ".huml": (t) => parseHuml(t),
};

const DEFINITION_KEYS = new Set(["name", "params", "query", "description"]);
const PARAM_KEYS = new Set(["type", "default", "description"]);
/** Param names: usable as `params.<name>` in the GET form (no dots) and as object keys. */
const PARAM_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** One definition found in a file, before validation. */
interface Found {
  file: string;
  /** JSON pointer of the definition in its file ("" for a single-definition file). */
  pointer: string;
  raw: unknown;
  name: string | null;
}

/** A definition error (deactivates the query). */
class DefinitionError extends Error {}

/**
 * Loads every well-known query under `path` (colon-separated directories, searched recursively),
 * compiling each definition once against `schema`. Never throws for bad files or directories:
 * they become {@link Registry.warnings}, and the queries concerned are not registered.
 */
export async function loadWellKnown(
  schema: Schema,
  path: string,
  opts: { maxDepth: number },
): Promise<Registry> {
  const warnings: LoadWarning[] = [];
  const found: Found[] = [];
  const seenFiles = new Set<string>();
  const seenDirs = new Set<string>();

  for (const dir of path.split(":").filter((d) => d !== "")) {
    for (const file of await walk(dir, seenDirs, seenFiles, warnings)) {
      found.push(...await readDefinitions(file, warnings));
    }
  }

  // Group by name: a name declared more than once deactivates every query of that name.
  const byName = new Map<string, Found[]>();
  for (const f of found) {
    if (f.name === null) continue;
    const list = byName.get(f.name) ?? [];
    list.push(f);
    byName.set(f.name, list);
  }

  const queries: WellKnown[] = [];
  for (const f of found) {
    if (f.name === null) {
      warnings.push({
        name: null,
        files: [f.file],
        message: `${where(f)}: ${nameProblem(f.raw)}; definition ignored`,
      });
      continue;
    }
    const same = byName.get(f.name)!;
    if (same.length > 1) {
      if (same[0] !== f) continue; // one warning per name
      const files = [...new Set(same.map((s) => s.file))];
      warnings.push({
        name: f.name,
        files,
        message: `well-known query "${f.name}" is declared by ${same.length} definitions ` +
          `(${same.map(where).join(", ")}); every query of that name is deactivated`,
      });
      continue;
    }
    try {
      queries.push(compileDefinition(schema, f, f.name, opts.maxDepth));
    } catch (e) {
      warnings.push({
        name: f.name,
        files: [f.file],
        message: `${where(f)}: well-known query "${f.name}" deactivated: ${describe(e)}`,
      });
    }
  }
  return new Registry(queries, warnings);
}

/** `file` or `file#/pointer` of a definition, for messages. */
function where(f: Found): string {
  return f.pointer === "" ? f.file : `${f.file}#${f.pointer}`;
}

function nameProblem(raw: unknown): string {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    return `a definition must be an object, got ${kind(raw)}`;
  }
  const name = (raw as Record<string, unknown>).name;
  return name === undefined
    ? `"name" is missing`
    : `"name" must be a non-empty string, got ${kind(name)}`;
}

function kind(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "string") return v === "" ? "an empty string" : "string";
  return typeof v;
}

/** Message of a definition or compile error; a SvcError's JSON pointer is appended. */
function describe(e: unknown): string {
  if (e instanceof SvcError) {
    const d = e.details;
    const pointer = typeof d === "object" && d !== null && "pointer" in d ? String(d.pointer) : "";
    return `${e.code}: ${e.message}${
      pointer && !e.message.includes(pointer) ? ` (at ${pointer})` : ""
    }`;
  }
  return e instanceof Error ? e.message : String(e);
}

/**
 * Lists the definition files under `dir`, recursively, sorted, skipping names starting with `_`
 * or `.`; a missing or unreadable directory is a warning. Symbolic links are followed, each
 * directory and file visited once.
 */
async function walk(
  dir: string,
  seenDirs: Set<string>,
  seenFiles: Set<string>,
  warnings: LoadWarning[],
): Promise<string[]> {
  let real: string;
  try {
    real = await Deno.realPath(dir);
    const info = await Deno.stat(real);
    if (!info.isDirectory) {
      warnings.push({ name: null, files: [dir], message: `${dir}: not a directory; ignored` });
      return [];
    }
  } catch (e) {
    const why = e instanceof Deno.errors.NotFound ? "directory not found" : describe(e);
    warnings.push({
      name: null,
      files: [dir],
      message: `${dir}: ${why}; no well-known queries loaded from it`,
    });
    return [];
  }
  if (seenDirs.has(real)) return [];
  seenDirs.add(real);

  const out: string[] = [];
  const entries: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) entries.push(e.name);
  } catch (e) {
    warnings.push({
      name: null,
      files: [dir],
      message: `${dir}: cannot read directory: ${describe(e)}`,
    });
    return [];
  }
  entries.sort();
  for (const name of entries) {
    if (name.startsWith("_") || name.startsWith(".")) continue;
    const full = `${dir.endsWith("/") ? dir.slice(0, -1) : dir}/${name}`;
    let info: Deno.FileInfo;
    try {
      info = await Deno.stat(full);
    } catch {
      continue; // dangling symbolic link
    }
    if (info.isDirectory) {
      out.push(...await walk(full, seenDirs, seenFiles, warnings));
    } else if (info.isFile && Object.hasOwn(PARSERS, extension(name))) {
      const realFile = await Deno.realPath(full).catch(() => full);
      if (seenFiles.has(realFile)) continue;
      seenFiles.add(realFile);
      out.push(full);
    }
  }
  return out;
}

function extension(name: string): string {
  const i = name.lastIndexOf(".");
  return i <= 0 ? "" : name.slice(i).toLowerCase();
}

/** Reads and parses one file into its definitions; an unusable file is a warning. */
async function readDefinitions(file: string, warnings: LoadWarning[]): Promise<Found[]> {
  let value: unknown;
  try {
    let text = await Deno.readTextFile(file);
    if (text.startsWith("\uFEFF")) text = text.slice(1);
    if (/\.ya?ml$/i.test(file)) await loadYaml();
    value = PARSERS[extension(file)](text);
  } catch (e) {
    // The first line only: YAML errors append a multi-line excerpt of the file.
    const msg = (e instanceof Error ? e.message : String(e)).split("\n")[0].replace(/:$/, "");
    warnings.push({
      name: null,
      files: [file],
      message: `${file}: cannot parse file: ${msg}; its well-known queries are deactivated`,
    });
    return [];
  }
  if (typeof value !== "object" || value === null) {
    warnings.push({
      name: null,
      files: [file],
      message: `${file}: expected a definition object or an array of them, got ${kind(value)}`,
    });
    return [];
  }
  const list: unknown[] = Array.isArray(value) ? value : [value];
  return list.map((raw, i) => {
    const name = typeof raw === "object" && raw !== null && !Array.isArray(raw) &&
        typeof (raw as Record<string, unknown>).name === "string" &&
        (raw as Record<string, unknown>).name !== ""
      ? (raw as Record<string, string>).name
      : null;
    return { file, pointer: Array.isArray(value) ? `/${i}` : "", raw, name };
  });
}

/** Validates one uniquely named definition and compiles its query. Throws on any problem. */
function compileDefinition(schema: Schema, f: Found, name: string, maxDepth: number): WellKnown {
  const def = f.raw as Record<string, unknown>;
  for (const key of Object.keys(def)) {
    if (!DEFINITION_KEYS.has(key)) {
      throw new DefinitionError(
        `unknown field "${key}" (expected name, params, query, description)`,
      );
    }
  }
  if (def.description !== undefined && typeof def.description !== "string") {
    throw new DefinitionError(`"description" must be a string`);
  }
  const params = parseParams(def.params);
  if (def.query === undefined) throw new DefinitionError(`"query" is missing`);
  if (typeof def.query !== "object" || def.query === null || Array.isArray(def.query)) {
    throw new DefinitionError(`"query" must be a Relation object, got ${kind(def.query)}`);
  }
  const node = parseQuery(schema, def.query, {
    maxDepth,
    params: Object.fromEntries(Object.keys(params).map((p) => [p, {}])),
    pointer: `${f.pointer}/query`,
  });
  return { name, file: f.file, params, node };
}

/** Validates the `params` field of a definition. */
function parseParams(raw: unknown): Record<string, ParamDef> {
  const out: Record<string, ParamDef> = {};
  if (raw === undefined || raw === null) return out;
  if (typeof raw !== "object" || Array.isArray(raw)) {
    throw new DefinitionError(`"params" must be an object of param definitions, got ${kind(raw)}`);
  }
  for (const [p, def] of Object.entries(raw as Record<string, unknown>)) {
    if (!PARAM_NAME.test(p)) {
      throw new DefinitionError(`param name "${p}" must match ${PARAM_NAME.source}`);
    }
    if (typeof def !== "object" || def === null || Array.isArray(def)) {
      throw new DefinitionError(
        `param "${p}" must be an object with "type" and optional "default"`,
      );
    }
    const d = def as Record<string, unknown>;
    for (const key of Object.keys(d)) {
      if (!PARAM_KEYS.has(key)) {
        throw new DefinitionError(
          `param "${p}": unknown field "${key}" (expected type, default, description)`,
        );
      }
    }
    if (typeof d.type !== "string") {
      throw new DefinitionError(
        d.type === undefined
          ? `param "${p}": "type" is missing`
          : `param "${p}": "type" must be a string`,
      );
    }
    if (!isParamType(d.type)) {
      throw new DefinitionError(
        `param "${p}": unknown type "${d.type}" (supported: ${PARAM_TYPES.join(", ")})`,
      );
    }
    const required = !Object.hasOwn(d, "default");
    if (!required && d.default !== null && !matchesType(d.type, d.default)) {
      throw new DefinitionError(
        `param "${p}": default ${JSON.stringify(d.default)} is not of type ${d.type}`,
      );
    }
    out[p] = { type: d.type, required, default: required ? undefined : d.default };
  }
  return out;
}
