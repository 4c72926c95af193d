/**
 * svc's metrics as plain numbers (served at `/svc/metrics`): any module counts what it does
 * (`metrics.reloads.inc(…)`) at the cost of a map lookup; the Prometheus registry (prom-client,
 * src/observe/metrics_prom.ts) is loaded only when metrics are scraped, so a svc without metrics never
 * loads it.
 *
 * @module
 */
import type { PathKind } from "./access.ts";

/** Upper bounds of the request latency histogram, in seconds. */
export const LATENCY_BUCKETS = [
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

/** Upper bounds of the reload duration histogram, in seconds. */
export const RELOAD_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** A counter by label values (none, or a fixed set of names). */
export class Counts<L extends string = never> {
  /** The counts by their labels, in first-seen order. */
  readonly series = new Map<string, { labels: Record<L, string>; n: number }>();

  /** Adds `n` (default 1) to the series of `labels`. */
  inc(labels?: Record<L, string>, n = 1): void {
    const l = labels ?? ({} as Record<L, string>);
    const key = JSON.stringify(l);
    const s = this.series.get(key);
    if (s) s.n += n;
    else this.series.set(key, { labels: { ...l }, n });
  }
}

/** A histogram without labels: non-cumulative counts per upper bound, sum and count. */
export class Observations {
  readonly buckets: number[];
  sum = 0;
  count = 0;

  /** A histogram over `bounds` (ascending upper bounds). */
  constructor(readonly bounds: number[]) {
    this.buckets = bounds.map(() => 0);
  }

  /** Records one value. */
  observe(v: number): void {
    const i = this.bounds.findIndex((b) => v <= b);
    if (i >= 0) this.buckets[i]++;
    this.sum += v;
    this.count++;
  }
}

/**
 * Request counts by kind and status as plain numbers: a request costs a map lookup and an
 * increment (prom-client's label validation and hashing cost ~7% of a primary-key read's CPU).
 * `requestCounts` keeps first-seen order.
 */
export interface RequestCount {
  kind: PathKind;
  status: string;
  n: number;
}
/** Every request count, in first-seen order. */
export const requestCounts: RequestCount[] = [];
const requestCountIndex = new Map<PathKind, Map<number, RequestCount>>();

/** Latency observations by kind: non-cumulative counts per bucket (one per upper bound). */
export interface Latency {
  buckets: number[];
  sum: number;
  count: number;
}
/** Latency observations by path kind. */
export const latencyByKind = new Map<PathKind, Latency>();

/** Counts one read run on `target` (`primary` or `replica<i>`). */
export function countRead(target: string): void {
  metrics.reads.inc({ target });
}

/** The counters and histograms svc updates as it works. */
export const metrics = {
  /** Database errors answered, by SQLSTATE class (the code's first two characters). */
  dbErrors: new Counts<"class">(),
  /** Reloads (startup and signal), by outcome. */
  reloads: new Counts<"reason" | "outcome">(),
  /** Reload duration. */
  reloadDuration: new Observations(RELOAD_BUCKETS),
  /**
   * Pooled connections closed because their lease outlived the lease deadline
   * (`pg.query.statement_timeout` + `pg.lease_grace` without progress; src/db/pool.ts).
   */
  leasesKilled: new Counts(),
  /**
   * Streamed answers whose client was too slow for a busy pool, by outcome: `read_ahead` (the
   * rest read into memory, the connection freed) or `ended` (truncated; src/http/read_ahead.ts).
   */
  slowClients: new Counts<"outcome">(),
  /** Reads by where they ran (`primary`, `replica<i>` of `pg.read_uri`; src/db/replicas.ts). */
  reads: new Counts<"target">(),
  /** SSO logins, by provider and outcome; incremented by the SSO handlers. */
  ssoLogins: new Counts<"provider" | "outcome">(),
};

/** Where the scrape-time gauges read from (the running server). */
export interface MetricSources {
  pool(): { size: number; in_use: number; waiting: number; overdue: number };
  /** Bytes of streamed answers held for slow clients (src/http/read_ahead.ts). */
  readAhead(): number;
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

/** The sources bound last (null before a server started). */
export function metricSources(): MetricSources | null {
  return sources;
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

/** Content type of the Prometheus text exposition (prom-client's registry's). */
export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";
