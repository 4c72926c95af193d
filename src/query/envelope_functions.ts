/**
 * Functions `/svc` does not call: full-control routes, middleware and SSO callbacks. They take the
 * `req` (or login payload) svc builds — verified claims, the identity a provider asserted — and
 * trust it; through `/svc` any client could pass them a forged one (a callback mapping a made-up
 * e-mail to a role, a route reading `req.jwt`). They are reached through their own paths only;
 * `/svc` answers them as functions that do not exist (docs/routes.md, docs/sso.md).
 *
 * @module
 */
import { type Config, samlEntries } from "../config/load.ts";
import { findFunctions } from "../db/schema.ts";
import type { AppState } from "../state/runtime.ts";

const bystate = new WeakMap<AppState, ReadonlySet<number>>();

/** The OIDs of the state's envelope functions (made once per state). */
export function envelopeFunctions(state: AppState, cfg: Config): ReadonlySet<number> {
  let set = bystate.get(state);
  if (!set) bystate.set(state, set = collect(state, cfg));
  return set;
}

function collect(state: AppState, cfg: Config): Set<number> {
  const out = new Set<number>();
  for (const r of [...state.routes.routes, ...state.routes.middleware]) {
    if (r.fullControl || r.middleware) out.add(r.fn.oid);
  }
  // SSO callbacks: each entry's own callback_function, else http.functions.sso_callback.
  const entries: { callback_function?: string }[] = [
    ...Object.values(cfg.openid),
    ...samlEntries(cfg).map(([, e]) => e),
  ];
  const names = new Set<string>();
  if (cfg.http.functions.sso_callback) names.add(cfg.http.functions.sso_callback);
  for (const e of entries) {
    const own = e.callback_function;
    if (own) names.add(own);
  }
  for (const name of names) {
    const dot = name.indexOf(".");
    const fns = dot < 0
      ? findFunctions(state.schema, name)
      : findFunctions(state.schema, name.slice(dot + 1), name.slice(0, dot));
    for (const f of fns) out.add(f.oid);
  }
  return out;
}
