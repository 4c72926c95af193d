/**
 * Clients that stop reading a large streamed answer do not hold the pool (docs/http.md, "Slow
 * clients"). Each such answer keeps its pooled connection while its client takes the chunks;
 * before, a pool of two held by two clients that never read answered every other request 503
 * PG_POOL_EXHAUSTED until the lease deadline (statement_timeout + lease_grace). Now, once such a
 * client took nothing for `pg.stall_timeout` while requests wait, the rest of its answer is read
 * ahead within `http.read_ahead` and the connection goes back to the pool — the client later gets
 * the whole answer — or, beyond the budget, the answer is ended (truncated) and the connection
 * freed. Both read paths are covered: a plain streamed read (POST and GET) and a batch of the
 * query stage.
 * Everything runs through a spawned svc, over raw sockets that stop reading.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { metricValue, spawnSvc, type SvcProcess } from "../helpers/process.ts";

const ROWS = 120_000;
const fixture = `
create table big (id int primary key, pad text not null);
insert into big select i, repeat(md5(i::text), 6) from generate_series(1, ${ROWS}) i;
grant select on big to "~anonymous";
`;

/** A request sent on a raw socket whose answer is not read until {@link Stalled.readAll}. */
interface Stalled {
  readAll(): Promise<{ complete: boolean; body: string }>;
}

/** A POST of `body`, or, for a {@link GetRead}, a GET of its query string. */
async function stalledPost(url: string, body: unknown): Promise<Stalled> {
  const u = new URL(url);
  const conn = await Deno.connect({ hostname: u.hostname, port: Number(u.port) });
  if (body instanceof GetRead) {
    await conn.write(
      new TextEncoder().encode(
        `GET /svc?${body.query} HTTP/1.1\r\nhost: ${u.host}\r\nconnection: close\r\n\r\n`,
      ),
    );
  } else {
    const json = new TextEncoder().encode(JSON.stringify(body));
    const head = `POST /svc HTTP/1.1\r\nhost: ${u.host}\r\ncontent-type: application/json\r\n` +
      `content-length: ${json.length}\r\nconnection: close\r\n\r\n`;
    await conn.write(new TextEncoder().encode(head));
    await conn.write(json);
  }
  return {
    async readAll() {
      const parts: Uint8Array[] = [];
      const buf = new Uint8Array(1 << 20);
      try {
        for (let n = await conn.read(buf); n !== null; n = await conn.read(buf)) {
          parts.push(buf.slice(0, n));
        }
      } catch { /* reset: a truncated answer */ }
      try {
        conn.close();
      } catch { /* closed */ }
      const all = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
      let o = 0;
      for (const p of parts) {
        all.set(p, o);
        o += p.length;
      }
      return dechunk(all);
    },
  };
}

/** The body of a chunked HTTP/1.1 answer, and whether its last chunk came. */
function dechunk(all: Uint8Array): { complete: boolean; body: string } {
  const text = new TextDecoder().decode(all);
  const start = text.indexOf("\r\n\r\n");
  assert.ok(start > 0, "no answer head");
  assert.match(text.slice(0, 12), /^HTTP\/1\.1 200/, text.slice(0, 200));
  let at = start + 4;
  let body = "";
  for (;;) {
    const eol = text.indexOf("\r\n", at);
    if (eol < 0) return { complete: false, body };
    const size = parseInt(text.slice(at, eol), 16);
    if (Number.isNaN(size)) return { complete: false, body };
    if (size === 0) return { complete: true, body };
    if (eol + 2 + size > text.length) return { complete: false, body };
    body += text.slice(eol + 2, eol + 2 + size);
    at = eol + 2 + size + 2;
  }
}

function checkRows(body: string): void {
  const rows = JSON.parse(body) as { id: number }[];
  assert.equal(rows.length, ROWS);
  assert.equal(rows[ROWS - 1].id, ROWS);
}

/** A small read on a fresh connection: its status and how long it took. */
async function quickRead(url: string): Promise<{ status: number; ms: number }> {
  const t0 = Date.now();
  const client = Deno.createHttpClient({});
  try {
    const r = await fetch(`${url}/svc`, {
      client,
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ relation: "artist", limit: 1 }),
    });
    await r.body?.cancel();
    return { status: r.status, ms: Date.now() - t0 };
  } finally {
    client.close();
  }
}

/** A read sent as GET /svc with this query string. */
class GetRead {
  constructor(readonly query: string) {}
}

const READ = { relation: "big", order_by: ["id"] };
/** {@link READ} in the GET form. */
const GET_READ = new GetRead("relation=big&order_by=id");
const BATCH = [{ relation: "artist", limit: 1 }, { relation: "big", order_by: ["id"] }];
const OUTCOME = (o: string) => new RegExp(`^svc_slow_clients_total\\{outcome="${o}"\\} `);

async function withSvc(flags: string[], fn: (svc: SvcProcess) => Promise<void>): Promise<void> {
  const uri = await chinookDb("slow_reader", fixture);
  let svc: SvcProcess | undefined;
  try {
    svc = await spawnSvc([
      `--pg.uri=${uri}`,
      "--http.workers=1",
      "--pg.pool_size=2",
      "--pg.pool_timeout=4",
      "--http.metrics.enable=true",
      ...flags,
    ]);
    await svc.waitHealthy();
    await fn(svc);
  } finally {
    await svc?.stop();
  }
}

/**
 * Two clients hold the pool of two and stop reading their answers (≈ 28 MB each); a small read
 * meanwhile must answer 200 well within `pg.pool_timeout`. Returns the stalled requests.
 */
async function holdThePool(svc: SvcProcess, body: unknown): Promise<Stalled[]> {
  const stalled = [await stalledPost(svc.url, body), await stalledPost(svc.url, body)];
  await new Promise((r) => setTimeout(r, 1500));
  const quick = await quickRead(svc.url);
  assert.equal(quick.status, 200, `a small read while the pool was held: ${quick.status}`);
  assert.ok(quick.ms < 3500, `the small read took ${quick.ms} ms`);
  return stalled;
}

Deno.test({
  name: "slow clients: answers read ahead free the pool, and the clients get them whole",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withSvc(["--http.read_ahead=268435456"], async (svc) => {
      for (const body of [READ, GET_READ, BATCH]) {
        for (const s of await holdThePool(svc, body)) {
          const got = await s.readAll();
          assert.ok(got.complete, "a read-ahead answer ended early");
          if (Array.isArray(body)) {
            const [first, rows] = JSON.parse(got.body);
            assert.equal(first.length, 1);
            checkRows(JSON.stringify(rows));
          } else checkRows(got.body);
        }
      }
      assert.ok((await metricValue(svc.url, OUTCOME("read_ahead"))) >= 6);
      assert.equal(await metricValue(svc.url, OUTCOME("ended")), 0);
      assert.equal(await metricValue(svc.url, /^svc_read_ahead_bytes /), 0, "bytes still held");
    });
  },
});

Deno.test({
  name: "slow clients: beyond the read-ahead budget their answers are ended and the pool freed",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withSvc(["--http.read_ahead=0"], async (svc) => {
      for (const body of [READ, GET_READ, BATCH]) {
        for (const s of await holdThePool(svc, body)) {
          const got = await s.readAll();
          assert.ok(!got.complete, "an ended answer came whole");
        }
      }
      assert.ok((await metricValue(svc.url, OUTCOME("ended"))) >= 6);
      assert.ok(svc.output().includes("a streamed answer was ended"), "no log line");
    });
  },
});

Deno.test({
  name: "slow clients: a read-ahead answer not taken for http.send_timeout is ended",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withSvc(["--http.read_ahead=268435456", "--http.send_timeout=2"], async (svc) => {
      const stalled = [await stalledPost(svc.url, READ), await stalledPost(svc.url, READ)];
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal((await quickRead(svc.url)).status, 200);
      assert.ok((await metricValue(svc.url, /^svc_read_ahead_bytes /)) > 0, "nothing held");
      // Nothing taken for longer than http.send_timeout: ended, the memory given back.
      await new Promise((r) => setTimeout(r, 3500));
      assert.equal(await metricValue(svc.url, /^svc_read_ahead_bytes /), 0, "bytes still held");
      for (const s of stalled) {
        assert.ok(!(await s.readAll()).complete, "an ended answer came whole");
      }
      assert.ok((await metricValue(svc.url, OUTCOME("ended"))) >= 2);
    });
  },
});

Deno.test({
  name: "slow clients: stop the cluster",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: stopDb,
});
