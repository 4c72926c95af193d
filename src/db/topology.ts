/**
 * Configuration of svc in a replicated deployment (docs/deployment.md, "Several svc replicas,
 * a primary and its streaming replicas"): the listen channel, the listen connection string and
 * the read replicas' connection strings. Pure helpers, checked when the configuration loads.
 *
 * @module
 */
import { channelProblem } from "./listen.ts";

/**
 * The read replicas' connection strings of `pg.read_uri` (a list, or one comma-separated
 * string). A connection string may itself hold commas (`postgres://u@h1,h2/db`, `host=a,b`):
 * an item starts a new connection string only when it starts with `postgres://`,
 * `postgresql://` or a libpq `key=` pair; any other item continues the previous one.
 */
export function readUris(items: readonly string[]): string[] {
  const out: string[] = [];
  for (const raw of items) {
    const item = raw.trim();
    if (item === "") continue;
    const starts = /^postgres(ql)?:\/\//i.test(item) || /^[a-z_]+\s*=/i.test(item);
    if (starts || out.length === 0) out.push(item);
    else out[out.length - 1] += `,${item}`;
  }
  return out;
}

/** The `pg.*` keys of a replicated deployment, as the configuration holds them. */
export interface TopologyKeys {
  notify_channel: string;
  listen_uri?: string;
  read_uri: string[];
  read_pool_size: number;
  read_max_lag: number;
  read_primary_claim?: string;
}

/** The first problem of these keys as a configuration error message, or null. */
export function topologyProblem(pg: TopologyKeys): string | null {
  if (pg.notify_channel !== "") {
    const p = channelProblem(pg.notify_channel);
    if (p) {
      return `invalid value for "pg.notify_channel": ${p} (a channel is an identifier of 1 to 63 bytes; "" disables listening)`;
    }
  }
  if (pg.read_uri.length > 0 && pg.read_pool_size < 1) {
    return `invalid value for "pg.read_pool_size": expected at least 1 with pg.read_uri, got ${pg.read_pool_size}`;
  }
  if (pg.read_primary_claim === "") {
    return `invalid value for "pg.read_primary_claim": expected a claim name`;
  }
  return null;
}
