/** The `/svc/metrics` response, and the optional separate metrics listener (`http.metrics.port`). */
import { METRICS_CONTENT_TYPE } from "../observe/metrics.ts";
import { metricsText } from "../observe/exposition.ts";
import type { Config } from "../config/load.ts";

/** The Prometheus text exposition (of this process, or from `text`) as a response. */
export async function metricsResponse(
  text: () => Promise<string> = metricsText,
): Promise<Response> {
  return new Response(await text(), {
    headers: { "content-type": METRICS_CONTENT_TYPE, "cache-control": "no-store" },
  });
}

/**
 * Whether the main listener serves `/svc/metrics`: `http.metrics.enable` (default: dev only),
 * unless `http.metrics.port` gives it a listener of its own.
 */
export function metricsOnMain(cfg: Config): boolean {
  return cfg.http.metrics.enable && cfg.http.metrics.port === undefined;
}

/** Whether requests are counted: `/svc/metrics` is served on some listener. */
export function metricsRecorded(cfg: Config): boolean {
  return cfg.http.metrics.enable || cfg.http.metrics.port !== undefined;
}

/** Serves `/svc/metrics` alone on `hostname:port` (404 elsewhere). */
export function serveMetrics(
  hostname: string,
  port: number,
  text: () => Promise<string> = metricsText,
): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve({ hostname, port, onListen: () => {} }, (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/svc/metrics" || path === "/metrics") return metricsResponse(text);
    return new Response("not found\n", { status: 404 });
  });
}
