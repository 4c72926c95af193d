/**
 * `http.workers` > 1 against the real process and a real cluster: both workers serve the one
 * port with their slice of the pool, health and metrics cover every worker, a reload under load
 * runs `reload.cmd` once and swaps every worker without losing a request, SIGTERM stops them all,
 * and SIGUSR1 never opens Deno's inspector.
 */
import assert from "node:assert/strict";
import { chinookDb, psql } from "../helpers/db.ts";
import { freshGet, metricValue, spawnSvc, workersInLog } from "../helpers/process.ts";
import { waitFor } from "../helpers/wait.ts";
import { freePort } from "../../src/db/cluster.ts";

Deno.test("two workers share the port, pool and state; metrics sum; SIGTERM stops both", async () => {
  const uri = await chinookDb();
  const svc = await spawnSvc([
    `--pg.uri=${uri}`,
    "--http.workers=2",
    "--pg.pool_size=3",
    "--http.metrics.enable=true",
    "--pg.query.wellknown_path=/nonexistent",
  ]);
  try {
    await svc.waitHealthy();
    const health = JSON.parse((await freshGet(`${svc.url}/svc/health/ready`)).body);
    assert.equal(health.workers, 2);
    assert.equal(health.pool.size, 3, "pg.pool_size is the total across workers");
    assert.match(svc.output(), /listening on .* with 2 workers/);

    const N = 60;
    for (let i = 0; i < N; i++) {
      const r = await freshGet(`${svc.url}/svc?relation=artist&where=eq(artist_id,${1 + i})`);
      assert.equal(r.status, 200, r.body);
      assert.equal(JSON.parse(r.body)[0].artist_id, 1 + i);
    }
    assert.deepEqual(
      [...workersInLog(svc, "/svc")].sort(),
      [0, 1],
      "both workers answered requests",
    );
    assert.equal(
      await metricValue(svc.url, /^svc_http_requests_total\{kind="svc_get",status="200"\}/),
      N,
      "the scrape sums every worker's counters",
    );
    assert.equal(await metricValue(svc.url, /^svc_pool_size /), 3);
    assert.equal(
      await metricValue(svc.url, /^svc_reloads_total\{reason="startup",outcome="ok"\}/),
      1,
    );
  } finally {
    const st = await svc.stop();
    assert.equal(st.code, 0, "SIGTERM drains every worker and exits 0");
  }
  assert.match(svc.output(), /shutting down 2 workers/);
  assert.ok(!/uncaught|unhandled/i.test(svc.output()), svc.output());
});

Deno.test("SIGUSR1 with two workers: reload.cmd once per signal, every worker swapped, no request lost", async () => {
  const uri = await chinookDb();
  const dir = await Deno.makeTempDir({ prefix: "svc-workers-" });
  const ran = `${dir}/reloads`;
  const svc = await spawnSvc([
    `--pg.uri=${uri}`,
    "--http.workers=2",
    "--pg.pool_size=4",
    "--http.metrics.enable=true",
    "--pg.query.wellknown_path=/nonexistent",
    `--reload.cmd=echo "$SVC_RELOAD_REASON" >> ${ran}`,
  ]);
  const results: number[] = [];
  let running = true;
  const loop = async () => {
    while (running) {
      // A fresh connection now and then, so both workers carry the load.
      const client = Deno.createHttpClient({});
      for (let i = 0; i < 5 && running; i++) {
        const r = await fetch(`${svc.url}/svc?relation=album&where=eq(album_id,1)`, { client });
        await r.body?.cancel();
        results.push(r.status);
      }
      client.close();
    }
  };
  try {
    await svc.waitHealthy();
    const clients = Array.from({ length: 4 }, loop);
    const ROUNDS = 4;
    for (let round = 1; round <= ROUNDS; round++) {
      await psql(
        `create table gadget_${round} (id int primary key); insert into gadget_${round} values (${round});
         grant select on gadget_${round} to "~anonymous";`,
      );
      svc.kill("SIGUSR1");
      const end = Date.now() + 15000;
      while (
        await metricValue(svc.url, /^svc_reloads_total\{reason="signal",outcome="ok"\}/) < round
      ) {
        assert.ok(Date.now() < end, `reload ${round} not done:\n${svc.output()}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      // Every worker has the new table (fresh connections land on both).
      for (let i = 0; i < 16; i++) {
        const r = await freshGet(`${svc.url}/svc?relation=gadget_${round}`);
        assert.equal(r.status, 200, `gadget_${round}: ${r.body}`);
        assert.deepEqual(JSON.parse(r.body), [{ id: round }]);
      }
    }
    running = false;
    await Promise.all(clients);
    assert.ok(results.length > 50, `load ran (${results.length} requests)`);
    assert.deepEqual(results.filter((s) => s !== 200), [], "no request lost or failed");
    const lines = (await Deno.readTextFile(ran)).trim().split("\n");
    assert.deepEqual(
      lines,
      ["startup", ...Array(ROUNDS).fill("signal")],
      "reload.cmd ran once each",
    );
    assert.deepEqual([...workersInLog(svc, "/svc")].sort(), [0, 1]);
  } finally {
    running = false;
    assert.equal((await svc.stop()).code, 0);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
  // Deno (≥ 2.9.2) opens an inspector on SIGUSR1; svc holds its port so none ever listens.
  assert.ok(!svc.output().includes("Debugger listening"), svc.output());
});

Deno.test("SIGUSR1 never opens Deno's inspector (one worker)", async () => {
  const uri = await chinookDb();
  const started = performance.now();
  const svc = await spawnSvc([
    `--pg.uri=${uri}`,
    "--http.workers=1",
    "--pg.query.wellknown_path=/nonexistent",
  ]);
  try {
    await svc.waitHealthy();
    // Deno arms its SIGUSR1 inspector 500 ms after the process starts: signal only past that
    // (a time, not a condition svc could report).
    const armed = started + 1000 - performance.now();
    if (armed > 0) await new Promise((r) => setTimeout(r, armed));
    svc.kill("SIGUSR1");
    await waitFor(() => /signal\\?"? reload done/.test(svc.output()), { what: "the reload" });
    let inspector = "";
    try {
      const r = await fetch("http://127.0.0.1:9229/json/list");
      inspector = await r.text();
    } catch { /* closed at once: nothing listens there but svc's guard */ }
    assert.ok(!inspector.includes("webSocketDebuggerUrl"), inspector);
    assert.match(svc.output(), /signal\\?"? reload done/);
  } finally {
    assert.equal((await svc.stop()).code, 0);
  }
  assert.ok(!svc.output().includes("Debugger listening"), svc.output());
});

Deno.test("a busy port stops a multi-worker start with the usual message", async () => {
  // Held plainly, or with SO_REUSEPORT as another svc's workers hold it (which workers binding
  // with SO_REUSEPORT would join, sharing its connections, before the port was probed).
  for (const reusePort of [false, true]) await busyPortStops(reusePort);
});

async function busyPortStops(reusePort: boolean): Promise<void> {
  const port = freePort();
  const blocker = Deno.listen({ hostname: "127.0.0.1", port, reusePort });
  try {
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL("../../main.ts", import.meta.url).pathname,
        "--http.host=127.0.0.1",
        `--http.port=${port}`,
        "--http.workers=2",
        "--jwt.secret=test-secret-test-secret-test-secret-0123456789",
        "--pg.uri=postgres://nobody@127.0.0.1:1/none",
      ],
      stdout: "piped",
      stderr: "piped",
    });
    const out = await child.output();
    assert.equal(out.code, 1);
    assert.match(new TextDecoder().decode(out.stderr), new RegExp(`port ${port} is in use`));
  } finally {
    blocker.close();
  }
}
