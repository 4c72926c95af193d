/**
 * A client that goes away cancels its running statement, whatever the request's size (through a
 * real server, real PostgreSQL, raw TCP clients): a ~2 KB POST with a session cookie (its body
 * arrives after its head, which Deno's HTTP server does not watch for a disconnect) running a
 * 20 s statement — a read, a write, a batch and a declared route — is disconnected (FIN,
 * half-close, RST), and within 1 s no statement of svc runs in PostgreSQL, nothing was committed,
 * and the pool is idle again; also with 2 workers and on an IPv6 listener. Plus the socket-table
 * parsing.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";
import { spawnSvc } from "../helpers/process.ts";
import { gone, parseTable, remoteKeys, type SocketTable } from "../../src/http/disconnect.ts";

const FIXTURE = `
create function disc_slow(s float8, pad text default '') returns int volatile language plpgsql
  as $$ begin perform pg_sleep(s); return 1; end $$;
comment on function disc_slow(float8, text) is 'route:: path: /slow';
grant execute on function disc_slow(float8, text) to app_user;
create table disc_log (k text primary key, pad text);
grant select, insert on disc_log to app_user;
-- A marked insert sleeps inside its transaction, so the disconnect lands before the commit.
create function disc_log_slow() returns trigger language plpgsql as $$
begin if new.k like 'slow-%' then perform pg_sleep(20); end if; return new; end $$;
create trigger disc_log_slow before insert on disc_log for each row execute function disc_log_slow();
`;

const uri = await chinookDb("disc", FIXTURE);
const sql = sqlClient(uri);
const PAD = "x".repeat(2000);

/** Statements of svc sleeping in `pg_sleep` (the slow ones) in the test database. */
async function running(): Promise<number> {
  const [{ n }] = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
    where application_name = 'svc' and state = 'active' and wait_event = 'PgSleep'
      and datname = current_database()`;
  return n;
}

async function until(what: string, ok: () => Promise<boolean>, ms: number): Promise<number> {
  const t0 = performance.now();
  while (!(await ok())) {
    if (performance.now() - t0 > ms) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return performance.now() - t0;
}

async function sessionCookie(): Promise<string> {
  const t = now();
  const c = cookie(await token({ role: "app_user", iat: t, exp: t + 1800 })) as { cookie: string };
  return c.cookie;
}

type Close = "fin" | "half-close" | "rst";

/**
 * Sends a POST over a raw TCP connection, waits until its statement runs, then leaves (`close`).
 * Returns the connection (closed for reading too once the caller is done).
 */
async function leave(
  port: number,
  path: string,
  body: unknown,
  close: Close,
  hostname = "127.0.0.1",
): Promise<void> {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  const bytes = new TextEncoder().encode(text);
  const head = `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n` +
    `content-length: ${bytes.length}\r\ncookie: ${await sessionCookie()}\r\n` +
    // The server answers "100 Continue" at once; leaving it unread makes close() a reset.
    (close === "rst" ? "expect: 100-continue\r\n" : "") + "\r\n";
  assert.ok(head.length + bytes.length > 2000, "a request well over 512 bytes");
  assert.equal(await running(), 0, "nothing sleeps before the request");
  const conn = await Deno.connect({ hostname, port });
  const all = new Uint8Array([...new TextEncoder().encode(head), ...bytes]);
  for (let o = 0; o < all.length;) o += await conn.write(all.subarray(o));
  await until("the statement starts", async () => (await running()) > 0, 15_000);
  if (close === "half-close") {
    await conn.closeWrite();
    // Reading on stays possible; the connection is closed once the test is done with it.
    setTimeout(() => conn.close(), 3000);
  } else {
    conn.close();
  }
}

/** After the client left: no statement within 1 s, the pool idle again. */
async function assertCancelled(url: string, label: string): Promise<void> {
  const ms = await until(
    `${label}: the statement is cancelled`,
    async () => (await running()) === 0,
    1000,
  );
  console.log(`${label}: statement gone ${ms.toFixed(0)} ms after the disconnect`);
  await until(`${label}: the pool is idle`, async () => {
    const r = await fetch(`${url}/svc/health/ready`);
    const body = await r.json();
    return body.pool.in_use === 0;
  }, 2000);
}

const cases: { label: string; path: string; body: () => unknown; committed?: string }[] = [
  { label: "read", path: "/svc", body: () => ({ function: "disc_slow", arguments: [20, [PAD]] }) },
  {
    label: "write",
    path: "/svc",
    body: () => ({
      query: { relation: "disc_log", select: ["k", "pad"] },
      data: [{ k: `slow-write-${crypto.randomUUID()}`, pad: PAD }],
    }),
    committed: "slow-write-%",
  },
  {
    label: "batch",
    path: "/svc",
    body: () => [
      {
        query: { relation: "disc_log", select: ["k"] },
        data: [{ k: `batch-${crypto.randomUUID()}` }],
      },
      { relation: "genre", limit: 1 },
      { function: "disc_slow", arguments: [20, [PAD]] },
    ],
    committed: "batch-%",
  },
  { label: "route", path: "/slow", body: () => ({ s: 20, pad: PAD }) },
];

/** Cancels what a failed case left sleeping, so that the next case starts clean. */
async function cleanUp(): Promise<void> {
  await sql`select pg_cancel_backend(pid) from pg_stat_activity
    where application_name = 'svc' and wait_event = 'PgSleep' and datname = current_database()`;
  await until("left-overs cancelled", async () => (await running()) === 0, 5000);
}

Deno.test("a disconnect cancels the running statement of any request (FIN, half-close, RST)", async (t) => {
  const srv = await startServer(uri, ["--pg.pool_size=2"]);
  const port = Number(new URL(srv.url).port);
  try {
    for (const close of ["fin", "half-close", "rst"] as Close[]) {
      for (const c of cases) {
        const label = `${c.label} (${close})`;
        await t.step(label, async () => {
          try {
            await leave(port, c.path, c.body(), close);
            await assertCancelled(srv.url, label);
            if (c.committed) {
              const [{ n }] =
                await sql`select count(*)::int as n from disc_log where k like ${c.committed}`;
              assert.equal(n, 0, `${label}: nothing committed`);
            }
          } finally {
            await cleanUp();
          }
        });
      }
    }
    // The pool serves again.
    const ok = await srv.post("/svc", { relation: "genre", limit: 1 });
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
  } finally {
    await srv.stop();
  }
});

Deno.test({
  name: "with 2 workers too",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const svc = await spawnSvc([`--pg.uri=${uri}`, "--http.workers=2", "--pg.pool_size=4"]);
    try {
      await svc.waitHealthy();
      const port = Number(new URL(svc.url).port);
      for (const c of [cases[0], cases[1]]) {
        await leave(port, c.path, c.body(), "fin");
        await assertCancelled(svc.url, `${c.label} (2 workers)`);
      }
      const [{ n }] = await sql`select count(*)::int as n from disc_log where k like 'slow-%'`;
      assert.equal(n, 0);
    } finally {
      await svc.stop();
    }
  },
});

Deno.test("an IPv6 listener: IPv4 (mapped) and IPv6 clients", async () => {
  const srv = await startServer(uri, ["--http.host=::", "--pg.pool_size=2"]);
  const port = Number(new URL(srv.url).port);
  try {
    for (const host of ["127.0.0.1", "::1"]) {
      await leave(port, cases[0].path, cases[0].body(), "fin", host);
      await assertCancelled(srv.url, `read (${host} on ::)`);
    }
  } finally {
    await srv.stop();
  }
});

Deno.test("socket-table keys: IPv4, IPv4 on an IPv6 socket, IPv6", () => {
  const le = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
  const v4 = remoteKeys({ transport: "tcp", hostname: "127.0.0.1", port: 54450 });
  assert.deepEqual(v4, [
    le ? "0100007F:D4B2" : "7F000001:D4B2",
    le ? "0000000000000000FFFF00000100007F:D4B2" : "00000000000000000000FFFF7F000001:D4B2",
  ]);
  assert.deepEqual(remoteKeys({ transport: "tcp", hostname: "::ffff:127.0.0.1", port: 54450 }), v4);
  assert.deepEqual(remoteKeys({ transport: "tcp", hostname: "::1", port: 80 }), [
    le ? "00000000000000000000000001000000:0050" : "00000000000000000000000000000001:0050",
  ]);
  assert.deepEqual(remoteKeys({ transport: "tcp", hostname: "fe80::1%eth0", port: 1 }).length, 1);
  assert.deepEqual(remoteKeys({ transport: "tcp", hostname: "not-an-ip", port: 1 }), []);
  assert.deepEqual(remoteKeys({ transport: "unix", path: "/tmp/s" }), []);
  const table: SocketTable = { states: new Map(), ports: new Set() };
  parseTable(
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n" +
      "   0: 0100007F:1F90 0100007F:D4B2 08 00000000:00000000 00:00000000 00000000     0\n" +
      "   1: 0100007F:1F90 0100007F:D4B4 01 00000000:00000000 00:00000000 00000000     0\n" +
      "   2: 0100007F:1F91 0100007F:D4B3 01 00000000:00000000 00:00000000 00000000     0\n" +
      "   3: 0100007F:1F90 0200007F:D4B5 01 00000000:00000000 00:00000000 00000000     0\n",
    ":1F90",
    table,
  );
  assert.deepEqual([...table.states.keys()], ["0100007F:D4B2", "0100007F:D4B4", "0200007F:D4B5"]);
  assert.equal(gone(["0100007F:D4B2"], table), true, "closed (CLOSE_WAIT)");
  assert.equal(gone(["0100007F:D4B4"], table), false, "established");
  assert.equal(gone(["0100007F:D4B3"], table), true, "reset: no connection from its port");
  assert.equal(gone(["0100007F:D4B5"], table), false, "its port under another address");
});

Deno.test("teardown", async () => {
  await sql.end();
  await stopDb();
});
