/**
 * Resource limits against the real server process (issue: reliability suite, item 4): huge
 * announced and streamed bodies (413 before buffering, flat memory), deep JSON, huge arrays, many
 * joins, large batches (clear 4xx, documented limits), and slow clients holding half-open
 * connections while normal requests are still answered quickly.
 */
import assert from "node:assert/strict";
import { chinookDb } from "../helpers/db.ts";
import { spawnSvc, type SvcProcess } from "../helpers/process.ts";

const MiB = 1024 * 1024;

function rssMiB(pid: number): { rss: number; hwm: number } {
  const s = Deno.readTextFileSync(`/proc/${pid}/status`);
  const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(s)![1]);
  return { rss: kb("VmRSS") / 1024, hwm: kb("VmHWM") / 1024 };
}

/** Resets the kernel's peak-RSS mark of `pid` (VmHWM), so the next peak is this test's. */
function resetPeak(pid: number): void {
  Deno.writeTextFileSync(`/proc/${pid}/clear_refs`, "5");
}

let svc: SvcProcess | null = null;
async function server(): Promise<SvcProcess> {
  if (!svc) {
    svc = await spawnSvc([`--pg.uri=${await chinookDb()}`, "--logging.level=error"]);
    await svc.waitHealthy();
  }
  return svc;
}

/** Writes every byte (`Conn.write` may write fewer than given). */
async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let o = 0;
  while (o < bytes.length) o += await conn.write(bytes.subarray(o));
}

/** Sends raw bytes on a new TCP connection and returns the response head (status line). */
async function rawRequest(
  url: string,
  head: string,
  body: (conn: Deno.Conn) => Promise<void>,
): Promise<string> {
  const u = new URL(url);
  const conn = await Deno.connect({ hostname: u.hostname, port: Number(u.port) });
  const reply = (async () => {
    const buf = new Uint8Array(4096);
    let text = "";
    while (!text.includes("\r\n\r\n")) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) break;
      text += new TextDecoder().decode(buf.subarray(0, n));
    }
    return text;
  })();
  await writeAll(conn, new TextEncoder().encode(head));
  await body(conn).catch(() => {}); // the server may close while we still send
  const text = await reply;
  try {
    conn.close();
  } catch { /* closed */ }
  return text;
}

async function post(s: SvcProcess, body: string): Promise<Response> {
  return await fetch(`${s.url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
}

Deno.test({
  name: "a 10 GB announced Content-Length is refused with 413 before any byte is read",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const s = await server();
    const t0 = performance.now();
    const head = await rawRequest(
      s.url,
      "POST /svc HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n" +
        "content-length: 10000000000\r\n\r\n",
      async () => {},
    );
    assert.match(head, /^HTTP\/1\.1 413/);
    assert.match(head.toLowerCase(), /x-svc-errorcode: http_body_too_large/);
    assert.ok(performance.now() - t0 < 2000);
  },
});

Deno.test({
  name: "a 1 GiB streamed body is cut at http.max_body_size: 413, RSS growth < 16 MiB",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const s = await server();
    const pid = s.child.pid;
    resetPeak(pid);
    const before = rssMiB(pid).rss;
    const chunk = new Uint8Array(MiB).fill(0x20);
    const sizeLine = new TextEncoder().encode(`${MiB.toString(16)}\r\n`);
    const crlf = new TextEncoder().encode("\r\n");
    let sent = 0;
    const head = await rawRequest(
      s.url,
      "POST /svc HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n" +
        "transfer-encoding: chunked\r\n\r\n",
      async (conn) => {
        for (let i = 0; i < 1024; i++) {
          await writeAll(conn, sizeLine);
          await writeAll(conn, chunk);
          await writeAll(conn, crlf);
          sent += MiB;
        }
      },
    );
    assert.match(head, /^HTTP\/1\.1 413/);
    const growth = rssMiB(pid).hwm - before;
    assert.ok(growth < 16, `RSS grew by ${growth.toFixed(1)} MiB (sent ${sent / MiB} MiB)`);
  },
});

Deno.test({
  name: "deep JSON, huge arrays, many joins and large batches are clear 4xx",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const s = await server();
    const expect = async (label: string, body: string, status: number, code: string) => {
      const t0 = performance.now();
      const r = await post(s, body);
      const text = await r.text();
      assert.equal(r.status, status, `${label}: ${text.slice(0, 200)}`);
      assert.equal(r.headers.get("x-svc-errorcode"), code, label);
      assert.ok(performance.now() - t0 < 5000, `${label} took too long`);
      return text;
    };
    const deep = `{"relation":"genre","where":${"[".repeat(10000)}1${"]".repeat(10000)}}`;
    const t = await expect("10,000-deep JSON", deep, 400, "QUERY_INVALID");
    assert.match(t, /max_json_depth/);
    const million = JSON.stringify({
      relation: "genre",
      where: ["in", "genre_id", ...Array.from({ length: 1_000_000 }, (_, i) => i)],
    });
    // 6.9 MB: under the default 10 MiB body cap, refused by the compiler's parameter bound.
    await expect("1,000,000-element array", million, 400, "QUERY_INVALID");
    const joins: Record<string, unknown> = {};
    for (let i = 0; i < 10000; i++) {
      joins[`j${i}`] = { relation: "track", on: { genre_id: "genre_id" } };
    }
    const j = await expect(
      "10,000 joins",
      JSON.stringify({ relation: "genre", join: joins }),
      400,
      "QUERY_INVALID",
    );
    assert.match(j, /max_joins/);
    const batch = JSON.stringify(Array.from({ length: 1000 }, () => ({ relation: "genre" })));
    const b = await expect("1,000 batched queries", batch, 400, "QUERY_INVALID");
    assert.match(b, /max_batch/);
    // Within the limits the same shapes work.
    const ok = await post(
      s,
      JSON.stringify(Array.from({ length: 100 }, () => ({ relation: "genre", limit: 1 }))),
    );
    assert.equal(ok.status, 200);
    assert.equal((await ok.json()).length, 100);
  },
});

Deno.test({
  name: "slowloris: 200 half-open connections do not slow normal requests (p99 < 100 ms)",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const s = await server();
    const u = new URL(s.url);
    const idle: Deno.Conn[] = [];
    try {
      for (let i = 0; i < 200; i++) {
        const c = await Deno.connect({ hostname: u.hostname, port: Number(u.port) });
        await writeAll(c, new TextEncoder().encode("POST /svc HTTP/1.1\r\nhost: x\r\ncontent-"));
        idle.push(c);
      }
      const times: number[] = [];
      // 5 s in the suite; `SLOWLORIS_SECONDS=30` runs the full 30 s.
      const end = Date.now() + 1000 * Number(Deno.env.get("SLOWLORIS_SECONDS") ?? "5");
      while (Date.now() < end) {
        const t0 = performance.now();
        const r = await fetch(`${s.url}/svc?relation=genre&limit=3`);
        assert.equal(r.status, 200);
        await r.body?.cancel();
        times.push(performance.now() - t0);
      }
      times.sort((a, b) => a - b);
      const p99 = times[Math.floor(times.length * 0.99)];
      assert.ok(p99 < 100, `p99 ${p99.toFixed(1)} ms over ${times.length} requests`);
      console.log(`slowloris: p99 ${p99.toFixed(1)} ms over ${times.length} requests`);
    } finally {
      for (const c of idle) {
        try {
          c.close();
        } catch { /* closed */ }
      }
    }
  },
});

Deno.test({
  name: "limits: stop the server",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    if (svc) {
      const st = await svc.stop();
      assert.equal(st.code, 0, svc.output());
      svc = null;
    }
  },
});
