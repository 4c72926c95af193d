/**
 * Prometheus metrics (served at `/svc/metrics`), built on prom-client. Counters and histograms
 * are module-level and typed, so any module can count what it does (`metrics.ssoLogins.inc(…)`);
 * gauges read their values from the running server's sources at scrape time.
 *
 * @module
 */
import client from "prom-client";
import type { PathKind } from "./http/access.ts";

/** The registry every svc metric lives in (not prom-client's global one). */
export const registry: client.Registry = new client.Registry();

const LATENCY_BUCKETS = [
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
];

/**
 * Request counts by kind and status as plain numbers: a request costs a map lookup and an
 * increment instead of prom-client's label validation and hashing (measured: that was ~7% of a
 * primary-key read's CPU). `requestCounts` keeps first-seen order, as prom-client's series do.
 */
interface RequestCount {
  kind: PathKind;
  status: string;
  n: number;
}
const requestCounts: RequestCount[] = [];
const requestCountIndex = new Map<PathKind, Map<number, RequestCount>>();

/** Latency observations by kind: non-cumulative counts per bucket (one per upper bound). */
interface Latency {
  buckets: number[];
  sum: number;
  count: number;
}
const latencyByKind = new Map<PathKind, Latency>();

/**
 * The request latency histogram, whose series are {@link observeRequest}'s plain bucket counts: its
 * `get()` (prom-client's public read of a metric, which {@link metricsJSON} and the workers'
 * aggregation use) answers them in prom-client's histogram shape (cumulative `_bucket` series
 * with `le`, then `+Inf`, `_sum` and `_count`, per kind in first-seen order).
 */
class CountedHistogram extends client.Histogram<"kind" | "le"> {
  // `le` is the bucket label prom-client adds to every histogram's `_bucket` series.
  override async get(): Promise<
    client.MetricObjectWithValues<client.MetricValueWithName<"kind" | "le">>
  > {
    type Value = client.MetricValueWithName<"kind" | "le">;
    const base = await super.get(); // name, help, type and aggregator; no series of its own
    const name = base.name;
    const values: Value[] = [];
    for (const [kind, h] of latencyByKind) {
      let acc = 0;
      LATENCY_BUCKETS.forEach((le, i) => {
        acc += h.buckets[i];
        values.push({ metricName: `${name}_bucket`, labels: { le, kind }, value: acc });
      });
      values.push(
        { metricName: `${name}_bucket`, labels: { le: "+Inf", kind }, value: h.count },
        { metricName: `${name}_sum`, labels: { kind }, value: h.sum },
        { metricName: `${name}_count`, labels: { kind }, value: h.count },
      );
    }
    return { ...base, values };
  }
}

/** The counters and histograms svc updates as it works. */
export const metrics = {
  /**
   * Requests answered, by path kind and status sent. Fed at scrape time from
   * {@link observeRequest}'s plain counts (do not increment it directly).
   */
  requests: new client.Counter<"kind" | "status">({
    name: "svc_http_requests_total",
    help: "HTTP requests answered, by path kind and status code sent.",
    labelNames: ["kind", "status"],
    registers: [registry],
    collect() {
      this.reset();
      for (const r of requestCounts) this.inc({ kind: r.kind, status: r.status }, r.n);
    },
  }),
  /**
   * Request latency until the response head, by path kind. Fed at scrape time from
   * {@link observeRequest}'s plain bucket counts (do not observe it directly).
   */
  latency: new CountedHistogram({
    name: "svc_http_request_duration_seconds",
    help: "Time from request to response head, by path kind.",
    labelNames: ["kind"],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  }),
  /** Database errors answered, by SQLSTATE class (the code's first two characters). */
  dbErrors: new client.Counter<"class">({
    name: "svc_db_errors_total",
    help: "Database errors turned into responses, by SQLSTATE class.",
    labelNames: ["class"],
    registers: [registry],
  }),
  /** Reloads (startup and signal), by outcome. */
  reloads: new client.Counter<"reason" | "outcome">({
    name: "svc_reloads_total",
    help: "Schema reloads, by reason (startup, signal) and outcome (ok, failed).",
    labelNames: ["reason", "outcome"],
    registers: [registry],
  }),
  /** Reload duration. */
  reloadDuration: new client.Histogram({
    name: "svc_reload_duration_seconds",
    help: "Duration of reloads (drain, reload.cmd, introspection, well-known queries).",
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  }),
  /**
   * Pooled connections closed because their lease outlived the lease deadline
   * (`pg.query.statement_timeout` + `pg.lease_grace` without progress; src/db/pool.ts).
   */
  leasesKilled: new client.Counter({
    name: "svc_pg_leases_killed_total",
    help:
      "Pooled connections closed and replaced because a request held them past statement_timeout + pg.lease_grace without progress.",
    registers: [registry],
  }),
  /** SSO logins, by provider and outcome; incremented by the SSO handlers. */
  ssoLogins: new client.Counter<"provider" | "outcome">({
    name: "svc_sso_logins_total",
    help: "SSO logins, by provider and outcome.",
    labelNames: ["provider", "outcome"],
    registers: [registry],
  }),
};

/** Where the scrape-time gauges read from (the running server). */
export interface MetricSources {
  pool(): { size: number; in_use: number; waiting: number; overdue: number };
  /** Well-known queries registered and deactivated by the last load (null before it). */
  wellknown(): { active: number; deactivated: number } | null;
  /** Verified-token cache hits and misses since start. */
  tokenCache(): { hits: number; misses: number };
  /** Uncaught errors the process guard absorbed. */
  uncaught(): number;
}

let sources: MetricSources | null = null;

/** Binds the gauges to a server's sources (the last server started wins). */
export function bindMetricSources(s: MetricSources): void {
  sources = s;
}

/** Records one answered request (access log middleware). */
export function observeRequest(kind: PathKind, status: number, seconds: number): void {
  let byStatus = requestCountIndex.get(kind);
  if (!byStatus) requestCountIndex.set(kind, byStatus = new Map());
  let c = byStatus.get(status);
  if (!c) {
    c = { kind, status: String(status), n: 0 };
    byStatus.set(status, c);
    requestCounts.push(c);
  }
  c.n++;
  if (!Number.isFinite(seconds)) return;
  let h = latencyByKind.get(kind);
  if (!h) latencyByKind.set(kind, h = { buckets: LATENCY_BUCKETS.map(() => 0), sum: 0, count: 0 });
  for (let i = 0; i < LATENCY_BUCKETS.length; i++) {
    if (seconds <= LATENCY_BUCKETS[i]) {
      h.buckets[i]++;
      break;
    }
  }
  h.sum += seconds;
  h.count++;
}

/** Counts a database error (SQLSTATE or `PG_<sqlstate>`) by its class; others are ignored. */
export function observeDbError(code: unknown): void {
  if (typeof code !== "string") return;
  const state = code.startsWith("PG_") ? code.slice(3) : code; // an already mapped PG_<sqlstate>
  if (/^[0-9A-Z]{5}$/.test(state)) metrics.dbErrors.inc({ class: state.slice(0, 2) });
}

/**
 * A scrape-time gauge. `aggregator` says how a multi-worker svc merges the workers' values
 * (src/workers/supervisor.ts): sum for per-worker quantities, max for process-wide ones.
 */
function gauge(
  name: string,
  help: string,
  read: (s: MetricSources) => number | undefined,
  aggregator: "sum" | "max" | "average" = "sum",
): void {
  new client.Gauge({
    name,
    help,
    aggregator,
    registers: [registry],
    collect() {
      const v = sources ? read(sources) : undefined;
      if (v !== undefined) this.set(v);
    },
  });
}

gauge("svc_pool_size", "Request pool connections.", (s) => s.pool().size);
gauge("svc_pool_in_use", "Request pool connections reserved by a request.", (s) => s.pool().in_use);
gauge("svc_pool_waiting", "Requests waiting for a pool connection.", (s) => s.pool().waiting);
gauge(
  "svc_pool_overdue",
  "Request pool connections leased past pg.query.statement_timeout without progress.",
  (s) => s.pool().overdue,
);
gauge(
  "svc_wellknown_active",
  "Well-known queries active after the last load.",
  (s) => s.wellknown()?.active,
  "max",
);
gauge(
  "svc_wellknown_deactivated",
  "Well-known queries deactivated by the last load.",
  (s) => s.wellknown()?.deactivated,
  "max",
);
gauge(
  "svc_token_cache_hits",
  "Session tokens found in the verified-token cache.",
  (s) => s.tokenCache().hits,
);
gauge(
  "svc_token_cache_misses",
  "Session tokens verified cryptographically (not in the cache).",
  (s) => s.tokenCache().misses,
);
gauge("svc_token_cache_hit_ratio", "Verified-token cache hits / lookups (0 before any).", (s) => {
  const { hits, misses } = s.tokenCache();
  return hits + misses ? hits / (hits + misses) : 0;
}, "average");
gauge(
  "svc_uncaught_errors",
  "Uncaught errors and unhandled rejections absorbed by the process guard.",
  (s) => s.uncaught(),
);
gauge(
  "svc_process_resident_memory_bytes",
  "Resident set size (of the whole process, workers included).",
  () => Deno.memoryUsage().rss,
  "max",
);

/** Every svc metric as prom-client's JSON (what a worker sends and the supervisor aggregates). */
export function metricsJSON(): Promise<
  client.MetricObjectWithValues<client.MetricValue<string>>[]
> {
  return registry.getMetricsAsJSON();
}

/**
 * The Prometheus text exposition of every svc metric: {@link metricsJSON} written out by
 * prom-client (as the supervisor writes the workers' merged values).
 */
export async function metricsText(): Promise<string> {
  return await client.AggregatorRegistry.aggregate([await metricsJSON()]).metrics();
}

/** Content type of {@link metricsText}. */
export const METRICS_CONTENT_TYPE: string = registry.contentType;
