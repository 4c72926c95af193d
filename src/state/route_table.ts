/**
 * Route and middleware declarations (docs/routes.md):
 * from configuration (`route.<schema>.<function>.*`) and from function comments
 * (`route:: path: /x/{id}, method: GET`). Pure: schema + config in, a route table with warnings
 * out. A bad configuration entry throws a {@link RouteConfigError} naming the key; a bad comment
 * is a warning and declares nothing.
 */
import type { RouteConfig } from "../config/load.ts";
import { canExecute, type Func, type Schema } from "../db/schema.ts";

/** Methods a route may declare. */
export const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] as const;

/** A compiled path pattern. */
export interface PathPattern {
  /** The declared text, e.g. `/users/{id}`. */
  text: string;
  /** Segments: literal text or `{name}` placeholders. */
  segments: ({ literal: string } | { param: string })[];
  /** The pattern with placeholders blanked (`/users/{}`): equal keys conflict. */
  key: string;
}

/** A declared route or middleware, resolved to one function. */
export interface Route {
  /** `schema.name` (the identifier `http.functions.allowed_auth` matches). */
  id: string;
  fn: Func;
  pattern: PathPattern;
  /** Accepted methods (HEAD follows GET and is not listed). Empty for middleware. */
  methods: string[];
  template: string | null;
  streamUpload: boolean;
  middleware: boolean;
  /** One `jsonb` argument and `(resp jsonb, content jsonb)` output: the full-control envelope. */
  fullControl: boolean;
  /** Whether the anonymous role can EXECUTE it (PUBLIC alone does not count) with schema USAGE. */
  anonymousReachable: boolean;
  /** Where it was declared: `route.<schema>.<function>` or `comment on function …`. */
  source: string;
}

/** The routes of one state: active routes, middleware (ordered), warnings. */
export interface RouteTable {
  routes: Route[];
  /** Longest prefix first, then by name. */
  middleware: Route[];
  warnings: string[];
}

/** A configuration entry that cannot be honoured (the message names the key). */
export class RouteConfigError extends Error {
  override name = "RouteConfigError";
}

/** Whether a path is reserved (`/auth/…`, `/svc`, `/svc/…`). */
export function reservedPath(path: string): boolean {
  return path === "/auth" || path.startsWith("/auth/") || path === "/svc" ||
    path.startsWith("/svc/");
}

/** Compiles a path pattern; throws an Error with the reason when it is malformed. */
export function compilePattern(text: string): PathPattern {
  if (!text.startsWith("/")) throw new Error(`path must start with "/": ${text}`);
  if (/[\s?#]/.test(text)) throw new Error(`path may not contain whitespace, ? or #: ${text}`);
  const parts = text === "/" ? [] : text.slice(1).split("/");
  const seen = new Set<string>();
  const segments: PathPattern["segments"] = parts.map((p, i) => {
    if (p === "" && i !== parts.length - 1) throw new Error(`empty path segment in ${text}`);
    if (p === "." || p === "..") {
      throw new Error(`a . or .. segment cannot be requested (clients resolve it away): ${text}`);
    }
    if (p.includes("%")) {
      throw new Error(`paths are matched decoded: write the character, not a %-escape: ${text}`);
    }
    const m = /^\{([A-Za-z_][A-Za-z0-9_]*)\}$/.exec(p);
    if (m) {
      if (seen.has(m[1])) throw new Error(`placeholder {${m[1]}} appears twice in ${text}`);
      seen.add(m[1]);
      return { param: m[1] };
    }
    if (p.includes("{") || p.includes("}")) {
      throw new Error(`a placeholder must be a whole segment like {name}: ${text}`);
    }
    return { literal: p };
  });
  const key = "/" + segments.map((s) => ("param" in s ? "{}" : s.literal)).join("/");
  return { text, segments, key };
}

/** Parses a comma-separated method list; throws on an unknown method. */
export function parseMethods(text: string): string[] {
  const out: string[] = [];
  for (const raw of text.split(",")) {
    const m = raw.trim().toUpperCase();
    if (!m) continue;
    if (m === "HEAD") continue; // follows GET
    if (!(METHODS as readonly string[]).includes(m)) {
      throw new Error(`unknown method ${raw.trim()}`);
    }
    if (!out.includes(m)) out.push(m);
  }
  if (out.length === 0) throw new Error(`no method in "${text}"`);
  return out;
}

/** Method inferred from volatility: IMMUTABLE/STABLE → GET, VOLATILE → POST. */
export function inferMethod(fn: Func): string {
  return fn.volatility === "volatile" ? "POST" : "GET";
}

/** Whether a function has the full-control envelope: `(req jsonb) → (resp jsonb, content jsonb)`. */
export function isFullControl(fn: Func): boolean {
  const cols = fn.returns.columns;
  return fn.inArgs.length === 1 && fn.inArgs[0].type === "jsonb" && cols !== null &&
    cols.length === 2 && cols[0].name === "resp" && cols[1].name === "content" &&
    cols.every((c) => c.type === "jsonb");
}

/** A function signature for messages: `app.f(jsonb, integer)`. */
export function signature(fn: Func): string {
  return `${fn.schema}.${fn.name}(${fn.inArgs.map((a) => a.type).join(", ")})`;
}

/** The `route::` declaration of a comment as key/value pairs, or null when there is none. */
export function parseComment(comment: string): Record<string, string> | null {
  const at = comment.indexOf("route::");
  if (at < 0) return null;
  const line = comment.slice(at + "route::".length).split(/\r?\n/)[0];
  const out: Record<string, string> = {};
  let last: string | null = null;
  for (const part of line.split(",")) {
    const m = /^\s*([A-Za-z_]+)\s*:\s*(.*?)\s*$/.exec(part);
    if (m) {
      last = m[1].toLowerCase();
      out[last] = m[2];
    } else if (last && part.trim()) {
      out[last] += `,${part.trim()}`; // `method: GET, POST`
    } else if (part.trim()) {
      throw new Error(`cannot read "${part.trim()}" (expected key: value)`);
    }
  }
  return out;
}

function bool(v: string): boolean {
  const t = v.trim().toLowerCase();
  if (t === "true" || t === "yes" || t === "on") return true;
  if (t === "false" || t === "no" || t === "off") return false;
  throw new Error(`not a boolean: ${v}`);
}

interface Declaration {
  fn: Func;
  path: string;
  method?: string;
  template?: string;
  streamUpload: boolean;
  middleware: boolean;
  source: string;
}

/** Builds a Route from a declaration; throws an Error with the reason when it is unusable. */
function build(d: Declaration, schema: Schema, anonymousRole: string): Route {
  if (reservedPath(d.path)) {
    throw new Error(`the path ${d.path} is reserved (/auth/ and /svc cannot be declared)`);
  }
  const pattern = compilePattern(d.path);
  const fullControl = isFullControl(d.fn);
  if (d.middleware) {
    if (!fullControl) {
      throw new Error(
        `middleware ${
          signature(d.fn)
        } must take one jsonb argument and return (resp jsonb, content jsonb)`,
      );
    }
    if (pattern.segments.some((s) => "param" in s)) {
      throw new Error(`a middleware path is a prefix and cannot have placeholders: ${d.path}`);
    }
  }
  return {
    id: `${d.fn.schema}.${d.fn.name}`,
    fn: d.fn,
    pattern,
    methods: d.middleware ? [] : d.method ? parseMethods(d.method) : [inferMethod(d.fn)],
    template: d.template ?? null,
    streamUpload: d.streamUpload,
    middleware: d.middleware,
    fullControl,
    anonymousReachable: schema.roles.has(anonymousRole) &&
      canExecute(schema, anonymousRole, d.fn, true),
    source: d.source,
  };
}

/** Number of segments of a middleware prefix (`/` has none). */
function prefixLength(r: Route): number {
  return r.pattern.segments.filter((s) => !("literal" in s && s.literal === "")).length;
}

/**
 * Declares every route and middleware of `schema`: configuration entries first (in key order),
 * then function comments (by schema, name, signature). A function declared in configuration
 * ignores its comment. Two routes sharing a method and a pattern: the later is deactivated with a
 * warning naming both.
 */
export function declareRoutes(
  schema: Schema,
  config: Record<string, Record<string, RouteConfig>>,
  anonymousRole: string,
): RouteTable {
  const warnings: string[] = [];
  const decls: Declaration[] = [];
  const configured = new Set<string>();
  for (const ns of Object.keys(config).sort()) {
    for (const name of Object.keys(config[ns]).sort()) {
      const key = `route.${ns}.${name}`;
      const c = config[ns][name];
      if (!c.path) throw new RouteConfigError(`${key}.path is required to declare a route`);
      const fns = schema.functions.get(`${ns}.${name}`) ?? [];
      if (fns.length === 0) {
        throw new RouteConfigError(`${key}: no function ${ns}.${name} in the database`);
      }
      if (fns.length > 1) {
        throw new RouteConfigError(
          `${key} matches several functions (${
            fns.map(signature).join("; ")
          }): declare the route in the comment of one of them instead`,
        );
      }
      configured.add(`${ns}.${name}`);
      decls.push({
        fn: fns[0],
        path: c.path,
        method: c.method,
        template: c.template,
        streamUpload: c.stream_upload ?? false,
        middleware: c.middleware ?? false,
        source: key,
      });
    }
  }
  const byName = [...schema.functions.entries()].sort(([a], [b]) => a.localeCompare(b));
  for (const [key, fns] of byName) {
    for (const fn of [...fns].sort((a, b) => signature(a).localeCompare(signature(b)))) {
      if (!fn.comment || !fn.comment.includes("route::")) continue;
      const source = `comment on function ${signature(fn)}`;
      if (configured.has(key)) {
        warnings.push(`${source}: ignored, route.${key} is configured`);
        continue;
      }
      try {
        const kv = parseComment(fn.comment)!;
        const known = ["path", "method", "template", "stream_upload", "middleware"];
        for (const k of Object.keys(kv)) {
          if (!known.includes(k)) throw new Error(`unknown key "${k}"`);
        }
        if (!kv.path) throw new Error("path is required");
        decls.push({
          fn,
          path: kv.path,
          method: kv.method,
          template: kv.template,
          streamUpload: kv.stream_upload ? bool(kv.stream_upload) : false,
          middleware: kv.middleware ? bool(kv.middleware) : false,
          source,
        });
      } catch (e) {
        warnings.push(`${source}: ${(e as Error).message}; no route declared`);
      }
    }
  }
  const routes: Route[] = [];
  const middleware: Route[] = [];
  const taken = new Map<string, Route>();
  for (const d of decls) {
    let r: Route;
    try {
      r = build(d, schema, anonymousRole);
    } catch (e) {
      if (d.source.startsWith("route.")) {
        throw new RouteConfigError(`${d.source}: ${(e as Error).message}`);
      }
      warnings.push(`${d.source}: ${(e as Error).message}; no route declared`);
      continue;
    }
    if (r.fn.executeGrantees.has("")) {
      warnings.push(
        `${r.middleware ? "middleware" : "route"} ${
          signature(r.fn)
        } is executable by PUBLIC (revoke execute … from public and grant it to the roles that need it)`,
      );
    }
    if (r.middleware) {
      middleware.push(r);
      continue;
    }
    const clash = r.methods.map((m) => taken.get(`${m} ${r.pattern.key}`)).find((x) => x);
    if (clash) {
      warnings.push(
        `${r.source} (${r.methods.join(",")} ${r.pattern.text}) conflicts with ${clash.source} (${
          clash.methods.join(",")
        } ${clash.pattern.text}): ${r.source} is deactivated`,
      );
      continue;
    }
    for (const m of r.methods) taken.set(`${m} ${r.pattern.key}`, r);
    routes.push(r);
  }
  middleware.sort((a, b) => prefixLength(b) - prefixLength(a) || a.id.localeCompare(b.id));
  return { routes, middleware, warnings };
}

/** The `route` entries of database.json, by `schema.name`. */
export function routeInfo(table: RouteTable): Map<string, Record<string, unknown>> {
  const out = new Map<string, Record<string, unknown>>();
  for (const r of [...table.routes, ...table.middleware]) {
    out.set(r.id, {
      path: r.pattern.text,
      methods: r.middleware ? [] : [...r.methods, ...(r.methods.includes("GET") ? ["HEAD"] : [])],
      middleware: r.middleware,
      template: r.template,
    });
  }
  return out;
}
