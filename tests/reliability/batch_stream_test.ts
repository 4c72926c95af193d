/**
 * A batch answer streams (through a real svc process and real PostgreSQL): 100 wide items, each
 * every track with 200 keys (≈ 2 GB of JSON in all), answer with the process alive and its RSS
 * growing by less than 200 MiB. svc runs with a 256 MiB V8 heap, so an answer built in memory
 * fails at once (it used to: 500 at JSON.stringify, or the process killed by "out of memory").
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { spawnSvc } from "../helpers/process.ts";

const LIMIT_MIB = 200;
const ITEMS = 100;
const KEYS = 200;

/** The wide batch: `ITEMS` times every track with `KEYS` keys (each the track's name). */
export function wideBatch(items = ITEMS, extra: Record<string, unknown> = {}): unknown[] {
  const select = Object.fromEntries(Array.from({ length: KEYS }, (_, i) => [`k${i}`, "name"]));
  return Array.from({ length: items }, () => ({ relation: "track", select, ...extra }));
}

function mem(pid: number): { rss: number; hwm: number } {
  const s = Deno.readTextFileSync(`/proc/${pid}/status`);
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, "m").exec(s)?.[1] ?? NaN);
  return { rss: kb("VmRSS") / 1024, hwm: kb("VmHWM") / 1024 };
}

/** Resets VmHWM to the current RSS; false where the kernel refuses. */
function resetPeak(pid: number): boolean {
  try {
    Deno.writeTextFileSync(`/proc/${pid}/clear_refs`, "5");
    return true;
  } catch {
    return false;
  }
}

async function post(url: string, body: unknown): Promise<Response> {
  return await fetch(`${url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

Deno.test({
  name: "a batch of 100 wide items streams: answered, process alive, RSS growth < 200 MiB",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const uri = await chinookDb();
    const svc = await spawnSvc(
      [`--pg.uri=${uri}`, "--http.workers=1", "--pg.pool_size=2", "--logging.level=error"],
      { DENO_V8_FLAGS: "--max-old-space-size=256" },
    );
    try {
      await svc.waitHealthy();
      const pid = svc.child.pid;
      // Warm up: the batch path, a streamed read, the compile of the wide select.
      for (let i = 0; i < 3; i++) {
        const r = await post(svc.url, wideBatch(2, { limit: 5 }));
        assert.equal(r.status, 200);
        assert.equal((await r.json()).length, 2);
        await (await post(svc.url, { relation: "track" })).body?.cancel();
      }
      const baseline = mem(pid).rss;
      const reset = resetPeak(pid);
      let sampled = baseline;
      const timer = setInterval(() => {
        try {
          sampled = Math.max(sampled, mem(pid).rss);
        } catch { /* exited: the assertions below say so */ }
      }, 20);
      let status = 0;
      let bytes = 0;
      let head = "";
      let tail = new Uint8Array(0);
      try {
        const r = await post(svc.url, wideBatch());
        status = r.status;
        for await (const chunk of r.body!) {
          if (head.length < 16) head += new TextDecoder().decode(chunk.subarray(0, 16));
          bytes += chunk.length;
          tail = chunk.subarray(Math.max(0, chunk.length - 2));
        }
      } finally {
        clearInterval(timer);
      }
      const peak = Math.max(sampled, reset ? mem(pid).hwm : 0);
      const growth = peak - baseline;
      console.log(
        `wide batch: ${status}, ${(bytes / 1e6).toFixed(0)} MB, RSS ${baseline.toFixed(0)} → ` +
          `${peak.toFixed(0)} MiB (+${growth.toFixed(0)} MiB, limit ${LIMIT_MIB} MiB)`,
      );
      assert.equal(status, 200);
      assert.ok(head.startsWith('[[{"k0"'), head);
      assert.equal(new TextDecoder().decode(tail), "]]", "the answer is complete");
      assert.ok(bytes > 1e9, `${bytes} bytes`);
      assert.ok(growth < LIMIT_MIB, `RSS grew by ${growth.toFixed(0)} MiB`);
      // Still alive and serving.
      const after = await post(svc.url, { relation: "genre", limit: 1 });
      assert.equal(after.status, 200);
      await after.body?.cancel();
    } finally {
      await svc.stop();
    }
  },
});

Deno.test("teardown", async () => {
  await stopDb();
});
