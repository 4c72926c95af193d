/** The `/svc/metrics` response, and the optional separate metrics listener (`http.metrics.port`). */
import { METRICS_CONTENT_TYPE, metricsText } from "../metrics.ts";

/** The Prometheus text exposition (of this process, or from `text`) as a response. */
export async function metricsResponse(
  text: () => Promise<string> = metricsText,
): Promise<Response> {
  return new Response(await text(), {
    headers: { "content-type": METRICS_CONTENT_TYPE, "cache-control": "no-store" },
  });
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
