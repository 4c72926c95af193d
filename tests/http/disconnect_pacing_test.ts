/**
 * The client watch's look-ups are paced by their own cost (src/http/disconnect.ts): a socket table
 * that takes `t` ms to read is read again no sooner than 50 × `t` ms later, however many requests
 * stay in flight; a cheap table is read every tick. The watch still aborts a request whose
 * connection left the table.
 */
import assert from "node:assert/strict";
import { ClientWatch, COST_SPACING, TICK_MS } from "../../src/http/disconnect.ts";

const PORT = 8123;
const CLIENT_PORT = 40001;
const hex = (n: number) => n.toString(16).toUpperCase().padStart(4, "0");
/** One line of /proc/net/tcp: 127.0.0.1:PORT ← 127.0.0.1:CLIENT_PORT in `state`. */
const table = (state: string) =>
  "  sl  local_address rem_address   st tx_queue rx_queue\n" +
  `   0: 0100007F:${hex(PORT)} 0100007F:${hex(CLIENT_PORT)} ${state} 00000000:00000000 00:0 0\n`;

const info = {
  remoteAddr: { transport: "tcp", hostname: "127.0.0.1", port: CLIENT_PORT },
  completed: Promise.resolve(),
} as unknown as Deno.ServeHandlerInfo;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Watches one long request for `ms` with a table that takes `cost` ms to read; the reads made. */
async function readsOver(ms: number, cost: number, state = "01") {
  let reads = 0;
  const watch = new ClientWatch(async () => {
    reads++;
    if (cost > 0) await sleep(cost);
    return table(state);
  });
  watch.listening({ transport: "tcp", hostname: "127.0.0.1", port: PORT });
  let aborted = false;
  const w = watch.watch(info, { abort: () => (aborted = true) });
  assert.ok(w, "Linux: the request is watched");
  await sleep(ms);
  w.stop();
  watch.close();
  return { reads, aborted };
}

Deno.test({
  name: "a dear table is read at most once per 50 × its cost; a cheap one every tick",
  ignore: !ClientWatch.supported(),
  async fn() {
    // 40 ms a read: no sooner than 2 s after the last one, so one read in 1.5 s (before: 1 per
    // tick once the last read ended, ≈ 16).
    const dear = await readsOver(1500, 40);
    assert.equal(COST_SPACING * 40 > 1500, true);
    assert.equal(dear.reads, 1, `a 40 ms table read ${dear.reads} times in 1.5 s`);
    assert.equal(dear.aborted, false);
    // An immediate read: once a tick (the first after the request's first tick in flight).
    const cheap = await readsOver(1000, 0);
    assert.ok(
      cheap.reads >= 1000 / TICK_MS / 3,
      `a cheap table read only ${cheap.reads} times in 1 s`,
    );
  },
});

Deno.test({
  name: "a connection no longer established is seen and its request aborted",
  ignore: !ClientWatch.supported(),
  async fn() {
    const closed = await readsOver(400, 0, "08"); // CLOSE_WAIT: the client closed its side
    assert.equal(closed.aborted, true);
    assert.equal(closed.reads, 1);
  },
});
