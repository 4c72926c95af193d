/**
 * CORS (docs/http.md): `http.cors.allowed_origins` holds exact origins or `*`. An exact
 * allowed origin gets itself in `Access-Control-Allow-Origin` plus credentials; `*` gets `*` and
 * never credentials; a refused origin (and the opaque origin `null`, always) gets no CORS header.
 * A preflight (`OPTIONS` with `Access-Control-Request-Method`) answers 204 either way.
 */

/** The CORS part of the configuration. */
export interface CorsConfig {
  allowed_origins: string[];
  allowed_methods: string[];
  allowed_headers: string[];
  max_age: number;
}

/** Response headers every CORS answer to an allowed origin exposes to scripts. */
const EXPOSE = "X-Svc-Errorcode, X-Request-Id, Content-Range, ETag";

/** How an origin is allowed: `"exact"`, `"any"` (via `*`) or null (refused). */
export function originMatch(cfg: CorsConfig, origin: string | null): "exact" | "any" | null {
  if (origin === null || origin === "" || origin === "null") return null;
  if (cfg.allowed_origins.includes(origin)) return "exact";
  if (cfg.allowed_origins.includes("*")) return "any";
  return null;
}

/** Whether CORS applies to a path (`/auth/` is browser navigation only: excluded). */
export function corsApplies(path: string): boolean {
  return !path.startsWith("/auth/");
}

/** Whether a request is a CORS preflight. */
export function isPreflight(req: Request): boolean {
  return req.method === "OPTIONS" && req.headers.has("origin") &&
    req.headers.has("access-control-request-method");
}

/** The 204 answer to a preflight: CORS headers only when the origin is allowed. */
export function preflight(cfg: CorsConfig, req: Request): Response {
  const origin = req.headers.get("origin");
  const match = originMatch(cfg, origin);
  const h = new Headers({ vary: "Origin" });
  if (match) {
    h.set("access-control-allow-origin", match === "exact" ? origin! : "*");
    if (match === "exact") h.set("access-control-allow-credentials", "true");
    h.set("access-control-allow-methods", cfg.allowed_methods.join(", "));
    h.set("access-control-allow-headers", cfg.allowed_headers.join(", "));
    h.set("access-control-max-age", String(cfg.max_age));
  }
  return new Response(null, { status: 204, headers: h });
}

/** Adds the CORS headers of an actual (non-preflight) request's origin to `headers`. */
export function applyCors(cfg: CorsConfig, origin: string | null, headers: Headers): void {
  const match = originMatch(cfg, origin);
  if (cfg.allowed_origins.length > 0) appendVary(headers, "Origin");
  if (!match) return;
  headers.set("access-control-allow-origin", match === "exact" ? origin! : "*");
  if (match === "exact") headers.set("access-control-allow-credentials", "true");
  headers.set("access-control-expose-headers", EXPOSE);
}

/**
 * The CORS headers of an actual request's origin, added to the fields of a response not built
 * yet (no `Vary` there before): the same headers as {@link applyCors}.
 */
export function corsFields(
  cfg: CorsConfig,
  origin: string | null,
  fields: Record<string, string>,
): void {
  if (cfg.allowed_origins.length > 0) fields["vary"] = "Origin";
  const match = originMatch(cfg, origin);
  if (!match) return;
  fields["access-control-allow-origin"] = match === "exact" ? origin! : "*";
  if (match === "exact") fields["access-control-allow-credentials"] = "true";
  fields["access-control-expose-headers"] = EXPOSE;
}

function appendVary(headers: Headers, name: string): void {
  const cur = headers.get("vary");
  if (!cur) headers.set("vary", name);
  else if (!cur.split(",").some((v) => v.trim().toLowerCase() === name.toLowerCase())) {
    headers.set("vary", `${cur}, ${name}`);
  }
}
