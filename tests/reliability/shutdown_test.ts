/**
 * SIGTERM exits as soon as the in-flight requests are answered (issue: no request can kill, wedge
 * or fool svc, item 9), with one worker and with two, while idle keep-alive, silent and half-sent
 * connections stay open; a request that outlives `reload.drain_timeout` is cancelled and the
 * process exits right after its answer. Real server process, real cluster.
 */
import assert from "node:assert/strict";
import { chinookDb, psql } from "../helpers/db.ts";
import { spawnSvc, type SvcProcess } from "../helpers/process.ts";

const FIXTURE = `
create function slow(s float8) returns int language plpgsql as $$
begin perform pg_sleep(s); return 1; end $$;
grant execute on function slow(float8) to "~anonymous";
`;
const db = () => chinookDb("shutdown", FIXTURE);

/** How long after the last answer the process may take to exit (it takes ~20 ms). */
const EXIT_AFTER_ANSWER_MS = 2000;

/** Polls until `cond` holds, failing after `ms`. */
async function until(cond: () => Promise<boolean>, what: string, ms = 10000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Statements sleeping in `pg_sleep` in the test database. */
async function sleeping(): Promise<number> {
  const out = await psql(
    "select count(*) as n from pg_stat_activity where wait_event = 'PgSleep' and datname = 'shutdown'",
    "shutdown",
  );
  return Number(/\n\s*(\d+)\s*\n/.exec(out)![1]);
}

/** Connections a client leaves open: idle keep-alive (fetch and raw), silent, half-sent. */
async function idleClients(svc: SvcProcess): Promise<() => void> {
  const port = Number(new URL(svc.url).port);
  const enc = new TextEncoder();
  const client = Deno.createHttpClient({});
  for (let i = 0; i < 3; i++) {
    const r = await fetch(`${svc.url}/svc/health/live`, { client });
    assert.equal(r.status, 200);
    await r.body?.cancel();
  }
  const kept = await Deno.connect({ hostname: "127.0.0.1", port });
  await kept.write(enc.encode("GET /svc/health/live HTTP/1.1\r\nhost: x\r\n\r\n"));
  const buf = new Uint8Array(4096);
  const n = await kept.read(buf);
  assert.match(new TextDecoder().decode(buf.subarray(0, n ?? 0)), /^HTTP\/1\.1 200/);
  const silent = await Deno.connect({ hostname: "127.0.0.1", port });
  const half = await Deno.connect({ hostname: "127.0.0.1", port });
  await half.write(enc.encode("GET /svc/health/live HTTP/1.1\r\nhost: x\r\n"));
  return () => {
    client.close();
    for (const c of [kept, silent, half]) {
      try {
        c.close();
      } catch { /* closed by svc */ }
    }
  };
}

/**
 * Starts svc, opens idle connections, sends `slow(seconds)`, waits until it sleeps in PostgreSQL,
 * sends SIGTERM and returns the answer and how long after it the process exited.
 */
async function terminateDuring(flags: string[], seconds: number) {
  const uri = await db();
  const svc = await spawnSvc([`--pg.uri=${uri}`, "--logging.level=error", ...flags]);
  await svc.waitHealthy();
  const closeIdle = await idleClients(svc);
  try {
    await until(async () => (await sleeping()) === 0, "no statement of an earlier test sleeping");
    const inflight = fetch(`${svc.url}/svc`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ function: "slow", arguments: [seconds] }),
    }).then(async (r) => ({ status: r.status, body: await r.text(), at: performance.now() }));
    await until(async () => (await sleeping()) === 1, "the slow request to reach PostgreSQL");
    const signalled = performance.now();
    svc.kill("SIGTERM");
    const answer = await inflight;
    const status = await svc.child.status;
    const exitedAfterAnswer = performance.now() - answer.at;
    const st = await svc.stop();
    return {
      answer,
      answeredAfterSignal: answer.at - signalled,
      exitedAfterAnswer,
      status,
      st,
      svc,
    };
  } finally {
    closeIdle();
  }
}

for (const workers of [1, 2]) {
  Deno.test({
    name:
      `SIGTERM with ${workers} worker(s): the in-flight request is answered, then the process exits at once`,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn() {
      const r = await terminateDuring([`--http.workers=${workers}`], 1.5);
      assert.equal(r.answer.status, 200, r.answer.body);
      assert.deepEqual(JSON.parse(r.answer.body), [{ slow: 1 }]);
      assert.equal(r.status.code, 0, r.svc.output());
      assert.ok(
        r.exitedAfterAnswer < EXIT_AFTER_ANSWER_MS,
        `exited ${Math.round(r.exitedAfterAnswer)} ms after the last answer`,
      );
    },
  });
}

Deno.test({
  name: "SIGTERM is bounded by reload.drain_timeout: the request is cancelled, then the exit",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const r = await terminateDuring(["--reload.drain_timeout=1", "--http.workers=1"], 60);
    assert.equal(r.answer.status, 504, r.answer.body);
    assert.equal(JSON.parse(r.answer.body).code, "PG_57014");
    assert.ok(r.answeredAfterSignal < 1000 + 3000, `answered ${r.answeredAfterSignal} ms after`);
    assert.equal(r.status.code, 0, r.svc.output());
    assert.ok(
      r.exitedAfterAnswer < EXIT_AFTER_ANSWER_MS,
      `exited ${Math.round(r.exitedAfterAnswer)} ms after the last answer`,
    );
    await until(async () => (await sleeping()) === 0, "the cancelled statement to end");
  },
});

Deno.test({
  name: "SIGINT then SIGTERM (a terminal's Ctrl-C under a wrapper): one clean shutdown, exit 0",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    // Found by a new user: Ctrl-C of `deno task dev` reaches svc twice (the terminal's SIGINT and
    // the wrapper's SIGTERM); the second shutdown's exit logged an unhandled rejection.
    for (const workers of [1, 2]) {
      const svc = await spawnSvc([`--pg.uri=${await db()}`, `--http.workers=${workers}`]);
      await svc.waitHealthy();
      const slow = fetch(`${svc.url}/svc`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ function: "slow", arguments: [0.5] }),
      }).then((r) => r.text());
      await until(async () => (await sleeping()) > 0, "the request to run");
      svc.kill("SIGINT");
      svc.kill("SIGTERM");
      assert.deepEqual(JSON.parse(await slow), [{ slow: 1 }]);
      const status = await svc.stop();
      assert.equal(status.code, 0, svc.output());
      assert.doesNotMatch(svc.output(), /unhandled|please report|not reachable/i, svc.output());
    }
  },
});
