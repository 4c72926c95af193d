/**
 * The live state across threads: the supervisor builds it once (introspection, well-known
 * queries) and sends the data; each worker rebuilds the few objects with behaviour (the
 * well-known registry, the route table) from it, without asking the database.
 *
 * @module
 */
import type { Config } from "../config/load.ts";
import type { AppState } from "../state/runtime.ts";
import { Registry } from "../wellknown/registry.ts";
import { declareRoutes } from "../state/route_table.ts";
import type { SharedState } from "./worker_protocol.ts";

/** The data of a state, to post to workers. */
export function packState(state: AppState): SharedState {
  return {
    schema: state.schema,
    wellknown: { queries: state.wellknown.queries(), warnings: state.wellknown.warnings },
    anonymousExists: state.anonymousExists,
    loadedAt: state.loadedAt,
  };
}

/** A worker's state from the supervisor's data (routes declared here; warnings were logged). */
export function unpackState(cfg: Config, shared: SharedState): AppState {
  return {
    schema: shared.schema,
    wellknown: new Registry(shared.wellknown.queries, shared.wellknown.warnings),
    anonymousExists: shared.anonymousExists,
    routes: declareRoutes(shared.schema, cfg.route, cfg.pg.query.anonymous_role),
    loadedAt: shared.loadedAt,
  };
}
