/**
 * The Prometheus registry of svc's metrics (prom-client), built from the plain counts of
 * src/metrics.ts at scrape time. Imported only when metrics are scraped or aggregated (its
 * module graph is a few MiB of resident memory a svc without metrics never loads).
 *
 * @module
 */
import client from "prom-client";
import {
  type Counts,
  type Latency,
  LATENCY_BUCKETS,
  latencyByKind,
  metrics,
  type MetricSources,
  metricSources,
  RELOAD_BUCKETS,
  requestCounts,
} from "./metrics.ts";

/** The registry every svc metric lives in (not prom-client's global one). */
export const registry: client.Registry = new client.Registry();

/** One histogram series of prom-client 15 (what `Histogram.zero` creates). */
interface Series {
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}

/** Sets the last series `zero()` added to a histogram to the given counts. */
function fill(h: client.Histogram<string>, bounds: number[], o: Latency) {
  // prom-client keeps a histogram's series in `hashMap` (15.x: non-cumulative bucket counts by
  // upper bound, sum, count); zero() just added this one, as the last entry.
  const series = Object.values((h as unknown as { hashMap: Record<string, Series> }).hashMap);
  const v = series[series.length - 1];
  bounds.forEach((b, i) => (v.bucketValues[b] = o.buckets[i]));
  v.sum = o.sum;
  v.count = o.count;
}

/** A counter fed at scrape time from plain counts. */
function counter<L extends string>(
  name: string,
  help: string,
  labelNames: L[],
  counts: Counts<L>,
): void {
  new client.Counter<L>({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      this.reset();
      for (const s of counts.series.values()) {
        if (labelNames.length) this.inc(s.labels as Partial<Record<L, string>>, s.n);
        else this.inc(s.n);
      }
    },
  });
}

new client.Counter<"kind" | "status">({
  name: "svc_http_requests_total",
  help: "HTTP requests answered, by path kind and status code sent.",
  labelNames: ["kind", "status"],
  registers: [registry],
  collect() {
    this.reset();
    for (const r of requestCounts) this.inc({ kind: r.kind, status: r.status }, r.n);
  },
});

new client.Histogram<"kind">({
  name: "svc_http_request_duration_seconds",
  help: "Time from request to response head, by path kind.",
  labelNames: ["kind"],
  buckets: LATENCY_BUCKETS,
  registers: [registry],
  collect() {
    this.reset();
    for (const [kind, h] of latencyByKind) {
      this.zero({ kind });
      fill(this, LATENCY_BUCKETS, h);
    }
  },
});

counter(
  "svc_db_errors_total",
  "Database errors turned into responses, by SQLSTATE class.",
  ["class"],
  metrics.dbErrors,
);
counter(
  "svc_reloads_total",
  "Schema reloads, by reason (startup, signal, notify) and outcome (ok, failed).",
  ["reason", "outcome"],
  metrics.reloads,
);

new client.Histogram({
  name: "svc_reload_duration_seconds",
  help: "Duration of reloads (drain, reload.cmd, introspection, well-known queries).",
  buckets: RELOAD_BUCKETS,
  registers: [registry],
  collect() {
    this.reset();
    const o = metrics.reloadDuration;
    if (o.count === 0) return;
    this.zero({});
    fill(this, RELOAD_BUCKETS, o);
  },
});

counter(
  "svc_pg_leases_killed_total",
  "Pooled connections closed and replaced because a request held them past statement_timeout + pg.lease_grace without progress.",
  [],
  metrics.leasesKilled,
);
counter(
  "svc_pg_reads_total",
  "Reads run with read replicas configured, by target (primary, replica0, replica1, …).",
  ["target"],
  metrics.reads,
);
counter(
  "svc_sso_logins_total",
  "SSO logins, by provider and outcome.",
  ["provider", "outcome"],
  metrics.ssoLogins,
);

/**
 * A scrape-time gauge. `aggregator` says how a multi-worker svc merges the workers' values
 * (src/process/supervisor.ts): sum for per-worker quantities, max for process-wide ones.
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
      const sources = metricSources();
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
