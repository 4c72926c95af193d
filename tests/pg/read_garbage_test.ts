/**
 * Streaming a large answer leaves no garbage in the old generation per socket read. Deno's
 * `Conn.read` rebuilt a set's table per read, made in the old generation once the connection was
 * old (every pooled one is): ≈ 170 bytes per 8 KiB PostgreSQL sends, ≈ 25 MB of svc's heap for a
 * 2 GB batch, freed only by full collections (src/pg/transport.ts, docs/performance.md "Memory").
 * Measured in a process of its own through a real cluster.
 */
import assert from "node:assert/strict";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { runProbe } from "../helpers/probe.ts";

const PROBE = new URL("../fixtures/read_garbage_probe.ts", import.meta.url).pathname;
const MB = 600;

Deno.test("a connection streaming 600 MB grows the old generation by less than 2.5 MiB", async () => {
  const uri = await emptyDb("read_garbage");
  try {
    const { text, result: r } = await runProbe<{ bytes: number; grown: number }>(
      PROBE,
      [uri, String(MB)],
      { denoArgs: ["--v8-flags=--expose-gc,--initial-old-space-size=512,--max-semi-space-size=4"] },
    );
    assert.ok(r.bytes > MB * 1e6 * 0.99, text);
    // Measured: ≈ 1.2 MiB (what a batch of rows promotes); ≈ 5.6 MiB when each read left its
    // garbage in the old generation.
    assert.ok(r.grown < 2.5, text);
  } finally {
    await stopDb();
  }
});
