/**
 * The Prometheus view of svc's metrics (src/observe/metrics.ts keeps them as plain numbers): the
 * prom-client registry (src/observe/metrics_prom.ts) is loaded at the first scrape only.
 *
 * @module
 */
import type { MetricObjectWithValues, MetricValue, Registry } from "prom-client";

/** The metrics as a prom-client registry (loaded at the first call). */
export async function promRegistry(): Promise<Registry> {
  return (await import("./metrics_prom.ts")).registry;
}

/** The Prometheus text exposition of every svc metric. */
export async function metricsText(): Promise<string> {
  return await (await import("./metrics_prom.ts")).exposition();
}

/** Every svc metric as prom-client's JSON (what a worker sends and the supervisor aggregates). */
export async function metricsJSON(): Promise<MetricObjectWithValues<MetricValue<string>>[]> {
  return await (await promRegistry()).getMetricsAsJSON();
}
