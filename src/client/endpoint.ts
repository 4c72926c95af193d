/**
 * Serving and writing database.ts: GET /svc/database.ts (filtered by what the role may use, asked
 * of PostgreSQL per request like database.json's; `?schemas=` intersected with
 * `http.typescript.schemas`, ETag/If-None-Match) and the `typescript.helper_path` reload hook
 * (temp file + rename).
 */
import { type Config, connectionString } from "../config/load.ts";
import type { AppState, ReloadHook } from "../state/runtime.ts";
import { log } from "../observe/log.ts";
import { generateClient, type Generated, type WellKnownDef } from "./generate.ts";
import { BoundedCache } from "../util/bounded_cache.ts";
import { type Visible, visibleAs, visibleKey } from "./visible.ts";
import { envelopeFunctions } from "../query/envelope_functions.ts";

/**
 * Generated files per state (a reload makes a new state), by what the role may use and schema
 * selection: at most {@link CLIENTS_KEPT} (a client choosing ever new selections makes the oldest
 * be generated again, never memory grow).
 */
const cache = new WeakMap<AppState, BoundedCache<string, Promise<Generated>>>();

/** Generated files kept per state (each ≈ 20–200 KB). */
const CLIENTS_KEPT = 64;

let generated = 0;

/** How many files {@link clientFor} generated since start (what its cache missed). */
export function clientsGenerated(): number {
  return generated;
}

function wellknownDefs(state: AppState): WellKnownDef[] {
  return state.wellknown.list().map((w) => ({ ...w, node: state.wellknown.get(w.name).node }));
}

/**
 * The schemas to export: `requested` (or all) intersected with the configured whitelist and, when
 * `known` (the introspected schema names) is given, with the schemas that exist — sorted, once
 * each, so that one selection has one spelling.
 */
export function exportSchemas(
  cfg: Config,
  requested: string[] | null,
  known?: readonly string[],
): string[] | null {
  const allowed = cfg.http.typescript.schemas ?? null;
  if (requested === null) return allowed;
  const chosen = allowed === null ? requested : requested.filter((s) => allowed.includes(s));
  if (!known) return chosen;
  return [...new Set(chosen.filter((s) => known.includes(s)))].sort();
}

/**
 * The generated file for what a role may use (`visible`, see ./visible.ts; null: everything) and a
 * schema selection, cached for the state's lifetime: roles shown the same share one file. The
 * functions `/svc` refuses (src/query/envelope_functions.ts, one set per state) are never in it.
 */
export function clientFor(
  cfg: Config,
  state: AppState,
  visible: Visible | null,
  schemas: string[] | null,
): Promise<Generated> {
  let m = cache.get(state);
  if (!m) cache.set(state, m = new BoundedCache({ maxEntries: CLIENTS_KEPT, refresh: "lazy" }));
  const k = JSON.stringify([visible === null ? null : visibleKey(visible), schemas]);
  let g = m.get(k);
  if (!g) {
    generated++;
    g = generateClient(state.schema, wellknownDefs(state), {
      visible,
      schemas,
      hidden: envelopeFunctions(state, cfg),
    });
    m.set(k, g);
  }
  return g;
}

/**
 * Answers GET /svc/database.ts for what the request's role may use (`visible`, asked of
 * PostgreSQL as that role).
 */
export async function databaseTsResponse(
  cfg: Config,
  state: AppState,
  visible: Visible,
  url: URL,
  ifNoneMatch: string | undefined,
): Promise<Response> {
  const raw = url.searchParams.get("schemas");
  const requested = raw === null ? null : raw.split(",").map((s) => s.trim()).filter(Boolean);
  const g = await clientFor(
    cfg,
    state,
    visible,
    exportSchemas(cfg, requested, state.schema.schemas),
  );
  const etag = `"${g.hash.slice(0, 32)}"`;
  const headers = {
    "content-type": "application/typescript; charset=utf-8",
    etag,
    "cache-control": "no-cache",
  };
  const tags = (ifNoneMatch ?? "").split(",").map((t) => t.trim().replace(/^W\//, ""));
  if (tags.includes(etag) || tags.includes("*")) {
    return new Response(null, { status: 304, headers });
  }
  return new Response(g.text, { status: 200, headers });
}

/**
 * The reload hook writing `typescript.helper_path`: the anonymous role's view (asked of PostgreSQL
 * as that role through a connection of its own; everything when that role does not exist),
 * limited to `http.typescript.schemas`. Failures are logged, never fail the reload.
 */
export function helperPathHook(cfg: Config, path: string): ReloadHook {
  return async (state) => {
    try {
      const visible = state.anonymousExists
        ? await visibleAs(
          connectionString(cfg),
          cfg.pg.query.anonymous_role,
          state.schema,
          cfg.pg.query.statement_timeout,
        )
        : null;
      const g = await clientFor(cfg, state, visible, exportSchemas(cfg, null));
      await writeAtomically(path, g.text);
      log.info("wrote {path}", { path });
    } catch (e) {
      log.error("could not write typescript.helper_path {path}: {error}", {
        path,
        error: (e as Error).message,
      });
    }
  };
}

/** Writes a file through a temporary file in the same directory and a rename. */
export async function writeAtomically(path: string, text: string): Promise<void> {
  const slash = path.lastIndexOf("/");
  const dir = slash >= 0 ? path.slice(0, slash) || "/" : ".";
  const tmp = `${dir}/.${path.slice(slash + 1)}.${crypto.randomUUID()}.tmp`;
  await Deno.writeTextFile(tmp, text);
  try {
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
}
