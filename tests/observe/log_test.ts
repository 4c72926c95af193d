import assert from "node:assert/strict";
import type { LogRecord } from "@logtape/logtape";
import { attributeFilter } from "../../src/observe/log.ts";
import { spawnSvc } from "../helpers/process.ts";

const rec = (properties: Record<string, unknown>) =>
  ({
    category: ["svc"],
    level: "info",
    message: [],
    rawMessage: "",
    timestamp: 0,
    properties,
  }) as unknown as LogRecord;

Deno.test("logging.filter.<attr> must match when present; logging.exclude.<attr> suppresses", () => {
  const f = attributeFilter({ path: "^/svc" }, { status: "^2" });
  assert.equal(f(rec({ path: "/svc/health", status: 503 })), true);
  assert.equal(f(rec({ path: "/other", status: 503 })), false);
  assert.equal(f(rec({ status: 500 })), true, "lines without the attribute are shown");
  assert.equal(f(rec({ path: "/svc", status: 200 })), false, "excluded after filters");
  assert.equal(f(rec({})), true);
});

Deno.test({
  name: "a long request path logged by the pretty handler does not block the server",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    // Before: the pretty formatter's line wrapping took ≈ 2 s for an 8 KB path, the whole
    // process blocked meanwhile. The path is cut in the log line now.
    const svc = await spawnSvc([
      "--logging.handler=pretty",
      "--logging.level=debug",
      "--pg.uri=postgres://nobody@127.0.0.1:1/none",
      "--pg.connect_timeout=1",
    ]);
    try {
      await svc.waitHealthy(15_000, 503);
      const path = "/" + "ab/".repeat(4000);
      const t0 = performance.now();
      const [long, live] = await Promise.all([
        fetch(svc.url + path),
        new Promise((r) => setTimeout(r, 50)).then(() => fetch(svc.url + "/svc/health/live")),
      ]);
      await long.body?.cancel();
      await live.body?.cancel();
      assert.equal(long.status, 404);
      assert.equal(live.status, 200);
      const ms = performance.now() - t0;
      assert.ok(ms < 1000, `the long path and a health check took ${ms.toFixed(0)} ms`);
      await new Promise((r) => setTimeout(r, 200));
      assert.match(svc.output(), /more characters/, "the logged path is cut");
    } finally {
      await svc.stop();
    }
  },
});

Deno.test({
  name: "NO_COLOR set: the pretty handler writes no colour codes (without it, it does)",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const run = async (env: Record<string, string>) => {
      const svc = await spawnSvc([
        "--logging.handler=pretty",
        "--pg.uri=postgres://nobody@127.0.0.1:1/none",
        "--pg.connect_timeout=1",
      ], env);
      try {
        await svc.waitHealthy(15_000, 503);
        return svc.output();
      } finally {
        await svc.stop();
      }
    };
    const plain = await run({ NO_COLOR: "1" });
    assert.match(plain, /listening on/);
    const ESC = "\x1b[";
    assert.ok(!plain.includes(ESC), plain.slice(0, 200));
    assert.ok((await run({})).includes(ESC));
  },
});
