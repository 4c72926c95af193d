/**
 * The request histogram is written from plain counts through prom-client's public API: the text
 * exposition and the JSON the workers send carry the same cumulative buckets, sum and count.
 */
import assert from "node:assert/strict";
import { metricsJSON, metricsText } from "../../src/observe/exposition.ts";
import { observeRequest } from "../../src/observe/metrics.ts";

const NAME = "svc_http_request_duration_seconds";

/** The latency series of kind `health` in the text exposition, as `suffix{labels} → value`. */
async function healthSeries(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const line of (await metricsText()).split("\n")) {
    const m = /^(svc_http_request_duration_seconds_\w+)\{(.*)\} (\S+)$/.exec(line);
    if (m && m[2].includes('kind="health"')) out.set(`${m[1]}{${m[2]}}`, Number(m[3]));
  }
  return out;
}

Deno.test("the latency histogram: cumulative buckets, +Inf, sum and count per kind", async () => {
  const before = await healthSeries();
  observeRequest("health", 200, 0.0004);
  observeRequest("health", 200, 0.02);
  observeRequest("health", 503, 7);
  const after = await healthSeries();
  const delta = (key: string) => (after.get(key) ?? NaN) - (before.get(key) ?? 0);
  const bucket = (le: string) => delta(`${NAME}_bucket{le="${le}",kind="health"}`);
  assert.equal(bucket("0.0005"), 1);
  assert.equal(bucket("0.01"), 1);
  assert.equal(bucket("0.025"), 2);
  assert.equal(bucket("5"), 2);
  assert.equal(bucket("+Inf"), 3);
  assert.equal(delta(`${NAME}_count{kind="health"}`), 3);
  assert.ok(Math.abs(delta(`${NAME}_sum{kind="health"}`) - 7.0204) < 1e-9);

  const text = await metricsText();
  assert.match(text, new RegExp(`# TYPE ${NAME} histogram`));
  const json = (await metricsJSON()).find((m) => m.name === NAME);
  assert.ok(json && String(json.type) === "histogram");
  const values = json.values as { metricName?: string; labels: { kind?: string }; value: number }[];
  const count = values.find((v) => v.metricName === `${NAME}_count` && v.labels.kind === "health");
  assert.equal(count?.value, after.get(`${NAME}_count{kind="health"}`));
});
