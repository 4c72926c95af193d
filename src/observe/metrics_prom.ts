/**
 * The Prometheus registry of svc's metrics (prom-client), built from the plain counts of
 * src/observe/metrics.ts at scrape time. Imported only when metrics are scraped or aggregated (its
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

/**
 * A histogram whose series are plain counts kept elsewhere ({@link Latency}: non-cumulative
 * counts per upper bound, sum, count): its `get()` — prom-client's public read of a metric, which
 * the text exposition and the workers' JSON both use — answers them in prom-client's histogram
 * shape (cumulative `_bucket` series with `le`, then `+Inf`, `_sum` and `_count`).
 */
class CountedHistogram<L extends string> extends client.Histogram<L | "le"> {
  readonly #series: () => Iterable<[Partial<Record<L, string>>, Latency]>;
  readonly #bounds: number[];

  constructor(
    cfg: { name: string; help: string; labelNames?: L[]; buckets: number[] },
    series: () => Iterable<[Partial<Record<L, string>>, Latency]>,
  ) {
    super({ ...cfg, labelNames: cfg.labelNames ?? [], registers: [registry] });
    this.#series = series;
    this.#bounds = cfg.buckets;
  }

  override async get(): Promise<
    client.MetricObjectWithValues<client.MetricValueWithName<L | "le">>
  > {
    type Value = client.MetricValueWithName<L | "le">;
    type Labels = client.LabelValues<L | "le">;
    const base = await super.get(); // name, help, type and aggregator; no series of its own
    const name = base.name;
    const values: Value[] = [];
    for (const [labels, h] of this.#series()) {
      let acc = 0;
      this.#bounds.forEach((le, i) => {
        acc += h.buckets[i];
        values.push({
          metricName: `${name}_bucket`,
          labels: { le, ...labels } as Labels,
          value: acc,
        });
      });
      values.push(
        {
          metricName: `${name}_bucket`,
          labels: { le: "+Inf", ...labels } as Labels,
          value: h.count,
        },
        { metricName: `${name}_sum`, labels: labels as Labels, value: h.sum },
        { metricName: `${name}_count`, labels: labels as Labels, value: h.count },
      );
    }
    return { ...base, values };
  }
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

new CountedHistogram<"kind">(
  {
    name: "svc_http_request_duration_seconds",
    help: "Time from request to response head, by path kind.",
    labelNames: ["kind"],
    buckets: LATENCY_BUCKETS,
  },
  function* () {
    for (const [kind, h] of latencyByKind) yield [{ kind }, h];
  },
);

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

new CountedHistogram(
  {
    name: "svc_reload_duration_seconds",
    help: "Duration of reloads (drain, reload.cmd, introspection, well-known queries).",
    buckets: RELOAD_BUCKETS,
  },
  () => (metrics.reloadDuration.count === 0 ? [] : [[{}, metrics.reloadDuration]]),
);

counter(
  "svc_pg_leases_killed_total",
  "Pooled connections closed and replaced because a request held them past statement_timeout + pg.lease_grace without progress.",
  [],
  metrics.leasesKilled,
);
counter(
  "svc_slow_clients_total",
  "Streamed answers whose client took nothing for pg.stall_timeout while requests waited for a connection, by outcome (read_ahead: the rest held in memory and the connection freed; ended: truncated).",
  ["outcome"],
  metrics.slowClients,
);
counter(
  "svc_pg_reads_total",
  "Reads run with read replicas configured, by target (primary, replica0, replica1, …).",
  ["target"],
  metrics.reads,
);
counter(
  "svc_sso_logins_total",
  "SSO logins, by provider (openid.<name>, saml.<name>) and outcome (ok, callback_failed, or the SSO_ code of a refusal).",
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
  "svc_read_ahead_bytes",
  "Bytes of streamed answers held in memory for clients too slow for a busy pool (http.read_ahead).",
  (s) => s.readAhead(),
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

/**
 * The Prometheus text exposition of every svc metric: the registry's JSON written out by
 * prom-client (as the supervisor writes the workers' merged values). Not `registry.metrics()`:
 * for a histogram that reads prom-client's own series, not {@link CountedHistogram.get}.
 */
export async function exposition(): Promise<string> {
  return await client.AggregatorRegistry.aggregate([await registry.getMetricsAsJSON()]).metrics();
}
