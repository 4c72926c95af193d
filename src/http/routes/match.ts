/**
 * Matching a request path and method against the route table (pure). A placeholder matches one
 * non-empty, percent-decoded segment; a literal segment beats a placeholder at the same place;
 * HEAD follows GET; a matching path with another method yields the `Allow` list. Middleware
 * matches by segment prefix (`/` covers everything).
 */
import type { PathPattern, Route, RouteTable } from "../../state/route_table.ts";

/** The outcome of matching a request. */
export type Match =
  | { kind: "route"; route: Route; params: Record<string, string> }
  | { kind: "method"; allow: string[] }
  | { kind: "none" };

/** Splits a URL pathname into decoded segments; null when a segment is not valid percent-encoding. */
export function pathSegments(pathname: string): string[] | null {
  const parts = pathname === "/" ? [] : pathname.slice(1).split("/");
  try {
    return parts.map((p) => decodeURIComponent(p));
  } catch {
    return null;
  }
}

/** Matches decoded segments against a pattern: the params, or null. */
export function matchPattern(
  pattern: PathPattern,
  segments: string[],
): Record<string, string> | null {
  if (pattern.segments.length !== segments.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < segments.length; i++) {
    const s = pattern.segments[i];
    if ("param" in s) {
      if (segments[i] === "") return null;
      params[s.param] = segments[i];
    } else if (s.literal !== segments[i]) return null;
  }
  return params;
}

/** Literal segments before placeholders: negative when `a` is more specific than `b`. */
function specificity(a: PathPattern, b: PathPattern): number {
  for (let i = 0; i < a.segments.length; i++) {
    const la = "literal" in a.segments[i], lb = "literal" in b.segments[i];
    if (la !== lb) return la ? -1 : 1;
  }
  return 0;
}

/** Finds the route for a method and pathname. */
export function matchRoute(table: RouteTable, method: string, pathname: string): Match {
  const segments = pathSegments(pathname);
  if (!segments) return { kind: "none" };
  const want = method === "HEAD" ? "GET" : method;
  const hits: { route: Route; params: Record<string, string> }[] = [];
  for (const route of table.routes) {
    const params = matchPattern(route.pattern, segments);
    if (params) hits.push({ route, params });
  }
  if (hits.length === 0) return { kind: "none" };
  const ok = hits.filter((h) => h.route.methods.includes(want));
  if (ok.length === 0) {
    const allow = new Set<string>();
    for (const h of hits) {
      for (const m of h.route.methods) {
        allow.add(m);
        if (m === "GET") allow.add("HEAD");
      }
    }
    return { kind: "method", allow: [...allow].sort() };
  }
  ok.sort((a, b) => specificity(a.route.pattern, b.route.pattern));
  return { kind: "route", route: ok[0].route, params: ok[0].params };
}

/** Whether a middleware prefix covers a pathname (whole segments; `/` covers everything). */
export function coversPath(mw: Route, pathname: string): boolean {
  const segments = pathSegments(pathname);
  if (!segments) return false;
  const prefix = mw.pattern.segments.filter((s) => !("literal" in s && s.literal === ""));
  if (prefix.length > segments.length) return false;
  return prefix.every((s, i) => "literal" in s && s.literal === segments[i]);
}

/** The middleware chain for a pathname, in running order (longest prefix first, then name). */
export function middlewareFor(table: RouteTable, pathname: string): Route[] {
  return table.middleware.filter((m) => coversPath(m, pathname));
}
