import assert from "node:assert/strict";
import type { LogRecord } from "@logtape/logtape";
import { attributeFilter } from "../../src/observe/log.ts";

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
