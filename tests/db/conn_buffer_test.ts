/**
 * A pooled connection must not keep a large answer's receive buffer once the answer is done
 * (the driver svc used before kept a view of its last received buffer until the connection's next
 * message: after a 24 MiB row, 24 MiB per idle connection). Measured in a
 * process of its own through a real cluster.
 */
import assert from "node:assert/strict";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { runProbe } from "../helpers/probe.ts";

const PROBE = new URL("../fixtures/conn_buffer_probe.ts", import.meta.url).pathname;
const MIB = 24;

Deno.test("a connection keeps no large receive or send buffer after a large row or parameter", async () => {
  const uri = await emptyDb("conn_buffers");
  try {
    const { text, result: r } = await runProbe<Record<string, number>>(PROBE, [uri, String(MIB)], {
      denoArgs: ["--v8-flags=--expose-gc"],
    });
    const row = MIB * 1024 * 1024 + 2; // a JSON string: the text and its quotes
    assert.equal(r.small, row + 2); // [row]
    assert.equal(r.streamed, row + 4); // [0,row]
    // The row passed through (≥ 24 MiB external while it was read); afterwards, with the
    // connection open and idle, external memory is back near where it was.
    assert.ok(r.afterSmall < r.base + 4, text);
    assert.ok(r.afterStream < r.base + 4, text);
    // The 200 KiB parameter's send buffer (1 MiB) is not kept either.
    assert.equal(r.sent, String(200 * 1024).length + 2); // [204800]
    assert.ok(r.afterParam < r.base + 0.5, text);
  } finally {
    await stopDb();
  }
});
