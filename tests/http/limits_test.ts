/**
 * Bounded cost and HTTP strictness (through real HTTP, real PostgreSQL): statement timeout (504),
 * client abort cancels the statement, pool exhaustion (503 PG_POOL_EXHAUSTED with Retry-After)
 * while health answers at once, answer-row size cap, JSON content type (415), charset and
 * content coding (415), Allow on 405, strict UTF-8.
 */
import assert from "node:assert/strict";
import { chinookDb, psql } from "../helpers/db.ts";
import { startServer, type TestServer } from "../helpers/server.ts";
import { waitFor } from "../helpers/wait.ts";

const FIXTURE = `
create function slow(s float8) returns int language plpgsql as $$
begin perform pg_sleep(s); return 1; end $$;
grant execute on function slow(float8) to "~anonymous";
create function show_timeout() returns text stable language sql
  as $$ select current_setting('statement_timeout') $$;
grant execute on function show_timeout() to "~anonymous";
create table wide (id int primary key, body text);
insert into wide select g, case when g = 1500 then repeat('x', 5000) else 'row' || g end
  from generate_series(1, 2000) g;
grant select on wide to "~anonymous";
create table sink (id serial primary key, body text);
create function sink_slowly() returns trigger language plpgsql as $$
begin perform pg_sleep(2); return null; end $$;
create trigger sink_slowly before insert on sink for each statement execute function sink_slowly();
grant select, insert on sink to "~anonymous";
grant usage on sequence sink_id_seq to "~anonymous";
create function take(body text) returns int language plpgsql as $$
begin perform pg_sleep(2); return length(body); end $$;
comment on function take(text) is 'route:: path: /take, method: POST';
grant execute on function take(text) to "~anonymous";
`;

const json = { "content-type": "application/json" };

function db(): Promise<string> {
  return chinookDb("limits", FIXTURE);
}

async function withServer(flags: string[], fn: (s: TestServer) => Promise<void>) {
  const s = await startServer(await db(), flags);
  try {
    await fn(s);
  } finally {
    await s.stop();
  }
}

/** POSTs JSON to `url`: the answer's status, error code, Retry-After, body and when it ended. */
function timedPost(url: string, body: unknown) {
  return fetch(url, { method: "POST", headers: json, body: JSON.stringify(body) })
    .then(async (r) => ({
      status: r.status,
      code: r.headers.get("x-svc-errorcode"),
      retry: r.headers.get("retry-after"),
      at: performance.now(),
      text: await r.text(),
    }));
}

async function activeSleeps(): Promise<number> {
  const out = await psql(
    "select count(*) from pg_stat_activity where state = 'active' " +
      "and application_name = 'svc'",
    "limits",
  );
  return Number(out.trim().split("\n").find((l) => /^\s*\d+\s*$/.test(l))?.trim() ?? "0");
}

Deno.test("pg.query.statement_timeout: a long statement answers 504 PG_57014", async () => {
  await withServer(["--pg.query.statement_timeout=300"], async (s) => {
    const t0 = performance.now();
    const r = await s.post("/svc", { function: "slow", arguments: [5] });
    const ms = performance.now() - t0;
    assert.equal(r.status, 504);
    assert.equal(r.headers.get("x-svc-errorcode"), "PG_57014");
    await r.body?.cancel();
    assert.ok(ms < 3000, `took ${ms} ms`);
    // The setting is per request: a quick query on the same pool still works.
    const ok = await s.post("/svc", { relation: "genre", limit: 1 });
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
  });
});

Deno.test("statement_timeout defaults to 30 s and is set inside the request", async () => {
  await withServer([], async (s) => {
    const r = await s.post("/svc", { function: "show_timeout" });
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), [{ show_timeout: "30s" }]);
  });
});

Deno.test("a client that goes away cancels its running statement", async () => {
  await withServer([], async (s) => {
    const ac = new AbortController();
    let settled: string | null = null;
    const p = fetch(`${s.url}/svc`, {
      method: "POST",
      headers: json,
      body: JSON.stringify({ function: "slow", arguments: [20] }),
      signal: ac.signal,
    }).then(async (r) => (settled = `${r.status} ${await r.text()}`), () => null);
    // Wait until the statement runs, then disconnect.
    await waitFor(async () => settled !== null || await activeSleeps() === 1, {
      what: "the slow statement running",
    });
    assert.equal(settled, null, "the request ended before the client left");
    assert.equal(await activeSleeps(), 1, "the slow statement never started");
    ac.abort();
    await p;
    await waitFor(async () => await activeSleeps() === 0, {
      what: "the statement cancelled after the client left",
    });
  });
});

Deno.test("pool exhausted: 503 PG_POOL_EXHAUSTED after pg.pool_timeout; health answers at once", async () => {
  // pool_timeout 3 s: health answering well before it shows it never waits for the pool; the
  // bounds leave room for a loaded machine.
  await withServer(["--pg.pool_size=2", "--pg.pool_timeout=3"], async (s) => {
    const busy = [1, 2].map(() => s.post("/svc", { function: "slow", arguments: [8] }));
    await waitFor(async () => await activeSleeps() === 2, { what: "both connections busy" });
    const t0 = performance.now();
    const live = await s.get("/svc/health/live");
    const liveMs = performance.now() - t0;
    assert.equal(live.status, 200);
    await live.body?.cancel();
    assert.ok(liveMs < 2000, `live took ${liveMs} ms`);
    const t1 = performance.now();
    const ready = await s.get("/svc/health/ready");
    const readyMs = performance.now() - t1;
    assert.equal(ready.status, 200);
    const body = await ready.json();
    assert.equal(body.pool.size, 2);
    assert.equal(body.pool.in_use, 2);
    assert.ok(readyMs < 2000, `ready took ${readyMs} ms`);
    const t2 = performance.now();
    const r = await s.post("/svc", { relation: "genre", limit: 1 });
    const waited = performance.now() - t2;
    assert.equal(r.status, 503);
    assert.equal(r.headers.get("x-svc-errorcode"), "PG_POOL_EXHAUSTED");
    assert.equal(r.headers.get("retry-after"), "1");
    await r.body?.cancel();
    assert.ok(waited >= 2900 && waited < 7000, `waited ${waited} ms`);
    for (const b of await Promise.all(busy)) {
      assert.equal(b.status, 200);
      await b.body?.cancel();
    }
    // Once free, the pool serves again.
    const after = await s.post("/svc", { relation: "genre", limit: 1 });
    assert.equal(after.status, 200);
    await after.body?.cancel();
  });
});

Deno.test("pg.query.max_row_size: an oversized row is 400 QUERY_RESULT_TOO_LARGE", async () => {
  await withServer(["--pg.query.max_row_size=2000"], async (s) => {
    // One genre with all its tracks is one large row.
    const big = await s.post("/svc", {
      relation: "genre",
      where: ["=", "genre_id", 1],
      join: { tracks: { relation: "track", on: { genre_id: "genre_id" } } },
    });
    assert.equal(big.status, 400);
    assert.equal(big.headers.get("x-svc-errorcode"), "QUERY_RESULT_TOO_LARGE");
    const body = await big.json();
    assert.match(body.message, /max_row_size/);
    const small = await s.post("/svc", { relation: "genre", where: ["=", "genre_id", 1] });
    assert.equal(small.status, 200);
    await small.body?.cancel();
    // The same through a ComplexQuery (transaction path).
    const complex = await s.post("/svc", {
      query: {
        relation: "genre",
        where: ["=", "genre_id", 1],
        join: { tracks: { relation: "track", on: { genre_id: "genre_id" } } },
      },
      count: true,
    });
    assert.equal(complex.status, 400);
    assert.equal(complex.headers.get("x-svc-errorcode"), "QUERY_RESULT_TOO_LARGE");
    await complex.body?.cancel();
  });
});

Deno.test("pg.query.max_row_size is exact: a row of the cap's size passes, one byte more is refused", async () => {
  // A small row (its datum may carry a 1-byte header) and a large one, each at the boundary.
  // Sorted: the row goes through a Sort, which stores small values with a 1-byte header.
  const small = { relation: "genre", where: ["<=", "genre_id", 1], order_by: ["name"] };
  const large = {
    relation: "genre",
    where: ["=", "genre_id", 2],
    join: { tracks: { relation: "track", on: { genre_id: "genre_id" } } },
  };
  for (const body of [small, large]) {
    let size = 0;
    await withServer([], async (s) => {
      const r = await s.post("/svc", body);
      assert.equal(r.status, 200);
      const text = await r.text();
      size = new TextEncoder().encode(text).length - 2; // the one row, without [ and ]
    });
    await withServer([`--pg.query.max_row_size=${size}`], async (s) => {
      const r = await s.post("/svc", body);
      assert.equal(r.status, 200, `a row of ${size} bytes under a cap of ${size}`);
      await r.body?.cancel();
    });
    await withServer([`--pg.query.max_row_size=${size - 1}`], async (s) => {
      const r = await s.post("/svc", body);
      assert.equal(r.status, 400, `a row of ${size} bytes under a cap of ${size - 1}`);
      assert.equal(r.headers.get("x-svc-errorcode"), "QUERY_RESULT_TOO_LARGE");
      await r.body?.cancel();
    });
  }
});

Deno.test("max_row_size mid-stream: the response ends with an error, never as valid JSON", async () => {
  await withServer(["--pg.query.max_row_size=2000"], async (s) => {
    const r = await s.post("/svc", { relation: "wide", order_by: ["id"] });
    assert.equal(r.status, 200); // the first 1,000 rows were already sent
    let complete = true;
    try {
      JSON.parse(await r.text());
    } catch {
      complete = false;
    }
    assert.equal(complete, false, "a stream cut by an oversized row must not parse as JSON");
  });
});

Deno.test("POST /svc requires Content-Type: application/json (415 otherwise)", async () => {
  await withServer([], async (s) => {
    const body = JSON.stringify({ relation: "genre", limit: 1 });
    for (const type of ["text/plain", "application/x-www-form-urlencoded", null]) {
      const r = await fetch(`${s.url}/svc`, {
        method: "POST",
        headers: type ? { "content-type": type } : {},
        body: new TextEncoder().encode(body),
      });
      assert.equal(r.status, 415, `content-type ${type}`);
      assert.equal(r.headers.get("x-svc-errorcode"), "HTTP_UNSUPPORTED_MEDIA_TYPE");
      await r.body?.cancel();
    }
    const ok = await fetch(`${s.url}/svc`, {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-8" },
      body,
    });
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
  });
});

Deno.test("another charset or a Content-Encoding is 415, not misread (POST /svc)", async () => {
  await withServer([], async (s) => {
    const body = JSON.stringify({ relation: "genre", limit: 1 });
    const gzipped = await new Response(
      new Blob([body]).stream().pipeThrough(new CompressionStream("gzip")),
    ).bytes();
    const cases: [Record<string, string>, BodyInit][] = [
      [{ "content-type": "application/json; charset=latin1" }, body],
      [{ "content-type": 'application/json; charset="ISO-8859-1"' }, body],
      [{ "content-type": "application/json; charset=utf-16" }, body],
      [{ ...json, "content-encoding": "gzip" }, gzipped],
      [{ ...json, "content-encoding": "br" }, body],
      // Longer than one read in a piece: the streamed body path refuses it too.
      [{ ...json, "content-encoding": "deflate" }, body + " ".repeat(40_000)],
    ];
    for (const [headers, b] of cases) {
      const r = await fetch(`${s.url}/svc`, { method: "POST", headers, body: b });
      assert.equal(r.status, 415, JSON.stringify(headers));
      assert.equal(r.headers.get("x-svc-errorcode"), "HTTP_UNSUPPORTED_MEDIA_TYPE");
      assert.match((await r.json()).message, /charset|Content-Encoding/);
    }
    for (
      const headers of [
        { "content-type": "application/json; charset=UTF-8" },
        { "content-type": 'application/json; charset="utf8"' },
        { ...json, "content-encoding": "identity" },
      ]
    ) {
      const ok = await fetch(`${s.url}/svc`, { method: "POST", headers, body });
      assert.equal(ok.status, 200, JSON.stringify(headers));
      await ok.body?.cancel();
    }
  });
});

Deno.test("a chunked body with another transfer coding (gzip, chunked) is 415", async () => {
  await withServer([], async (s) => {
    const u = new URL(s.url);
    const send = async (te: string): Promise<string> => {
      const conn = await Deno.connect({ hostname: u.hostname, port: Number(u.port) });
      const body = JSON.stringify({ relation: "genre", limit: 1 });
      const chunk = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
      await conn.write(
        new TextEncoder().encode(
          `POST /svc HTTP/1.1\r\nhost: ${u.host}\r\ncontent-type: application/json\r\n` +
            `transfer-encoding: ${te}\r\nconnection: close\r\n\r\n${chunk}`,
        ),
      );
      const buf = new Uint8Array(4096);
      let text = "";
      for (let n = await conn.read(buf); n !== null; n = await conn.read(buf)) {
        text += new TextDecoder().decode(buf.subarray(0, n));
      }
      conn.close();
      return text;
    };
    const gz = await send("gzip, chunked");
    assert.match(gz, /^HTTP\/1\.1 415/);
    assert.match(gz, /x-svc-errorcode: HTTP_UNSUPPORTED_MEDIA_TYPE/i);
    assert.match(await send("chunked"), /^HTTP\/1\.1 200/);
  });
});

/**
 * Opens a connection to `s`, sends `head` (request line, headers, blank line and any first body
 * bytes) then `send` bytes of `fill`, and leaves the body unfinished.
 */
async function partialBody(s: TestServer, head: string, send: number, fill: number) {
  const u = new URL(s.url);
  const conn = await Deno.connect({ hostname: u.hostname, port: Number(u.port) });
  await conn.write(new TextEncoder().encode(head));
  await writeAll(conn, new Uint8Array(send).fill(fill));
  return conn;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.length) off += await conn.write(bytes.subarray(off, off + 65536));
}

/** The first bytes of the answer on `conn` (its status line and headers), as text. */
async function firstAnswer(conn: Deno.Conn): Promise<string> {
  const buf = new Uint8Array(4096);
  const n = await conn.read(buf);
  return n === null ? "" : new TextDecoder().decode(buf.subarray(0, n));
}

Deno.test("bodies still arriving share http.receive_budget: past it 503 HTTP_BUSY, one alone always arrives", async () => {
  // Found by a hostile probe: N slow clients each sending all but the last byte of a 10 MB body
  // held N × 10 MB (100 of them: +1 GB), with nothing bounding N.
  await withServer(["--http.receive_budget=1000000"], async (s) => {
    const size = 3_000_000;
    const open = (send: number) =>
      partialBody(
        s,
        `POST /svc HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
          `content-length: ${size}\r\n\r\n`,
        send,
        0x20, // JSON whitespace
      );
    // The first body arrives alone beyond the budget (1.5 MB of 3 MB sent, held).
    const first = await open(1_500_000);
    await new Promise((r) => setTimeout(r, 300));
    // A second body arriving meanwhile is refused as its bytes would go past the budget.
    const second = await open(400_000);
    const refused = await firstAnswer(second);
    assert.match(refused, /^HTTP\/1\.1 503/);
    assert.match(refused, /x-svc-errorcode: HTTP_BUSY/i);
    second.close();
    // The first one, completed, runs: its bytes are then no longer arriving.
    const rest = new Uint8Array(size - 1_500_000).fill(0x20);
    rest.set(new TextEncoder().encode('{"relation":"genre","limit":1}'), rest.length - 40);
    await writeAll(first, rest);
    assert.match(await firstAnswer(first), /^HTTP\/1\.1 200/);
    first.close();
    // With nothing arriving, the next large body is received and answered.
    const r = await fetch(`${s.url}/svc`, {
      method: "POST",
      headers: json,
      body: " ".repeat(2_000_000) + '{"relation":"genre","limit":1}',
    });
    assert.equal(r.status, 200);
    await r.body?.cancel();
  });
});

Deno.test("multipart bodies held in memory share http.receive_budget too", async () => {
  // A probe of the receive budget: five stalled 700 KB multipart bodies to a route were all held.
  await withServer(["--http.receive_budget=1000000"], async (s) => {
    const open = (send: number) =>
      partialBody(
        s,
        `POST /take HTTP/1.1\r\nhost: x\r\n` +
          `content-type: multipart/form-data; boundary=b\r\ncontent-length: 3000000\r\n\r\n` +
          `--b\r\ncontent-disposition: form-data; name="body"\r\n\r\n`,
        send,
        0x78,
      );
    const first = await open(1_500_000);
    await new Promise((r) => setTimeout(r, 300));
    const second = await open(400_000);
    const refused = await firstAnswer(second);
    assert.match(refused, /^HTTP\/1\.1 503/);
    assert.match(refused, /x-svc-errorcode: HTTP_BUSY/i);
    second.close();
    first.close();
  });
});

Deno.test("large bodies run within http.body_budget: one at a time here, 503 HTTP_BUSY past the wait", async () => {
  // Each write's statement takes 2 s; bodies of 100 kB; room for one; waits end at 3 s.
  const write = (i: number) =>
    timedPost(`${s_.url}/svc`, {
      query: { relation: "sink", select: ["id", "body"] },
      data: [{ body: String(i).repeat(100_000) }],
    });
  let s_!: TestServer;
  await withServer(
    ["--http.body_budget=150000", "--pg.query.statement_timeout=3000"],
    async (s) => {
      s_ = s;
      await psql("truncate sink", "limits");
      const t0 = performance.now();
      const answers = Promise.all([write(1), write(2), write(3)]);
      // A small request meanwhile is not held back by the large ones.
      await new Promise((r) => setTimeout(r, 300));
      const small = await s.post("/svc", { relation: "genre", limit: 1 });
      assert.equal(small.status, 200);
      await small.body?.cancel();
      assert.ok(performance.now() - t0 < 900, "the small read answered while a large body ran");
      const done = (await answers).sort((a, b) => a.status - b.status || a.at - b.at);
      const seen = JSON.stringify(done.map((d) => [d.status, d.code, Math.round(d.at - t0)]));
      assert.deepEqual(done.map((d) => d.status), [200, 200, 503], seen);
      assert.equal(done[2].code, "HTTP_BUSY");
      assert.equal(done[2].retry, "1");
      // One after the other: the second ended a statement (2 s) after the first.
      assert.ok(done[1].at - done[0].at >= 1800, seen);
      assert.match(await psql("select count(*) from sink", "limits"), /\b2\b/);
    },
  );
  // Without the budget the three run at once: all written, within about one statement.
  await withServer(["--http.body_budget=0", "--pg.query.statement_timeout=3000"], async (s) => {
    s_ = s;
    await psql("truncate sink", "limits");
    const t0 = performance.now();
    const done = await Promise.all([write(1), write(2), write(3)]);
    assert.deepEqual(done.map((d) => d.status), [200, 200, 200]);
    assert.ok(Math.max(...done.map((d) => d.at)) - t0 < 3800);
  });
});

Deno.test("pg.query.transaction_timeout bounds a request's statements together: a batch of slow items is 504", async () => {
  await withServer([
    "--pg.query.statement_timeout=1500",
    "--pg.query.transaction_timeout=2000",
    "--pg.pool_size=1",
  ], async (s) => {
    // Five items of 0.9 s each: none times out alone; together they run past 2 s.
    const batch = Array.from({ length: 5 }, () => ({ function: "slow", arguments: [0.9] }));
    const t0 = performance.now();
    const r = await s.post("/svc", batch);
    const ms = performance.now() - t0;
    const text = await r.text();
    assert.equal(r.status, 504, text);
    assert.equal(r.headers.get("x-svc-errorcode"), "PG_57014");
    assert.match(
      JSON.parse(text).message,
      /longer than pg\.query\.transaction_timeout \(2000 ms\)/,
    );
    assert.ok(ms < 4000, `answered after ${ms.toFixed(0)} ms`);
    // The one pooled connection is free again at once, for a batch within the budget too.
    const ok = await s.post("/svc", batch.slice(0, 2));
    assert.equal(ok.status, 200, await ok.text());
    await waitFor(async () => (await activeSleeps()) === 0, { timeout: 3000 });
  });
});

Deno.test("route bodies share http.body_budget with /svc: one large body at a time here", async () => {
  // Each call takes 2 s; bodies of 100 kB (a route's and a write's); room for one; waits end at 3 s.
  const send = (path: string, body: unknown) => timedPost(`${s_.url}${path}`, body);
  const take = (i: number) => send("/take", { body: String(i).repeat(100_000) });
  let s_!: TestServer;
  await withServer(
    ["--http.body_budget=150000", "--pg.query.statement_timeout=3000"],
    async (s) => {
      s_ = s;
      await psql("truncate sink", "limits");
      const t0 = performance.now();
      const answers = Promise.all([
        take(1),
        take(2),
        send("/svc", {
          query: { relation: "sink", select: ["id", "body"] },
          data: [{ body: "3".repeat(100_000) }],
        }),
      ]);
      // A small route call meanwhile is not held back by the large bodies.
      await new Promise((r) => setTimeout(r, 300));
      const small = await send("/take", { body: "small" });
      assert.equal(small.status, 200, small.text);
      assert.equal(small.text, "5");
      assert.ok(small.at - t0 < 2900, "the small call ran beside the large body");
      const done = (await answers).sort((a, b) => a.status - b.status || a.at - b.at);
      const seen = JSON.stringify(done.map((d) => [d.status, d.code, Math.round(d.at - t0)]));
      assert.deepEqual(done.map((d) => d.status), [200, 200, 503], seen);
      assert.equal(done[2].code, "HTTP_BUSY");
      // One after the other: the second ended a call (2 s) after the first.
      assert.ok(done[1].at - done[0].at >= 1800, seen);
    },
  );
  // Without the budget they run at once.
  await withServer(["--http.body_budget=0", "--pg.query.statement_timeout=3000"], async (s) => {
    s_ = s;
    const t0 = performance.now();
    const done = await Promise.all([take(1), take(2), take(3)]);
    assert.deepEqual(done.map((d) => d.status), [200, 200, 200]);
    assert.equal(done[0].text, "100000");
    assert.ok(Math.max(...done.map((d) => d.at)) - t0 < 3800);
  });
});

Deno.test('huge unknown names answer at once (no "did you mean" over them)', async () => {
  await withServer([], async (s) => {
    const huge = "z".repeat(2_000_000);
    const bodies: unknown[] = [
      { relation: "artist", where: [huge, 1, 2] },
      { relation: huge },
      { function: huge },
      { relation: "artist", select: [huge] },
      { relation: "artist", order_by: [[huge, "name"]] },
      { relation: "artist", join: { a: { relation: "album", on: { [huge]: "artist_id" } } } },
    ];
    for (const body of bodies) {
      const t0 = performance.now();
      const r = await fetch(`${s.url}/svc`, {
        method: "POST",
        headers: json,
        body: JSON.stringify(body),
      });
      const text = await r.text();
      const ms = performance.now() - t0;
      assert.ok(r.status >= 400 && r.status < 500, `${r.status} ${text.slice(0, 200)}`);
      assert.ok(!text.includes("did you mean"), text.slice(-200));
      assert.ok(ms < 3000, `${JSON.stringify(body).slice(0, 60)}: ${ms.toFixed(0)} ms`);
    }
    // A typo of a normal length still gets its hint.
    const typo = await s.post("/svc", { relation: "artst" });
    assert.match((await typo.json()).message, /did you mean 'artist'/);
  });
});

Deno.test("405 on /svc carries Allow; invalid UTF-8 is 400 QUERY_INVALID", async () => {
  await withServer([], async (s) => {
    const put = await fetch(`${s.url}/svc`, { method: "PUT", headers: json, body: "{}" });
    assert.equal(put.status, 405);
    assert.equal(put.headers.get("x-svc-errorcode"), "QUERY_METHOD_NOT_ALLOWED");
    assert.match(put.headers.get("allow") ?? "", /GET.*POST/);
    await put.body?.cancel();
    const bytes = new Uint8Array([
      ...new TextEncoder().encode('{"relation":"genre","where":["=","name",["'),
      0xff,
      0xfe,
      ...new TextEncoder().encode('"]]}'),
    ]);
    const bad = await fetch(`${s.url}/svc`, { method: "POST", headers: json, body: bytes });
    assert.equal(bad.status, 400);
    assert.equal(bad.headers.get("x-svc-errorcode"), "QUERY_INVALID");
    assert.match((await bad.json()).message, /UTF-8/);
    // Longer bodies take the lenient decoder first (src/request/body.ts): invalid bytes there are
    // refused alike, and a real U+FFFD in valid text is a value like any other.
    const pad = " ".repeat(200);
    const long = new Uint8Array([...bytes.subarray(0, bytes.length - 4), ...enc(`"]]${pad}}`)]);
    const badLong = await fetch(`${s.url}/svc`, { method: "POST", headers: json, body: long });
    assert.equal(badLong.status, 400);
    assert.equal(badLong.headers.get("x-svc-errorcode"), "QUERY_INVALID");
    await badLong.body?.cancel();
    const real = `{"relation":"genre","where":["=","name",["\uFFFD no such genre"]]}${pad}`;
    const ok = await fetch(`${s.url}/svc`, { method: "POST", headers: json, body: enc(real) });
    assert.equal(ok.status, 200);
    assert.deepEqual(await ok.json(), []);
  });
});

const enc = (s: string) => new TextEncoder().encode(s);

Deno.test("clients that disconnect mid-request never leak pooled connections", async () => {
  await withServer(["--pg.pool_size=2", "--pg.pool_timeout=2"], async (s) => {
    // Aborts land before, during and after the pipelined begin/role/query/commit.
    for (let round = 0; round < 3; round++) {
      await Promise.all(Array.from({ length: 200 }, (_, i) => {
        const ac = new AbortController();
        setTimeout(() => ac.abort(), i % 23);
        return fetch(`${s.url}/svc`, {
          method: "POST",
          headers: json,
          body: JSON.stringify({ relation: "track", where: ["=", "track_id", 1 + i] }),
          signal: ac.signal,
        }).then((r) => r.body?.cancel(), () => {});
      }));
    }
    // Every connection comes back (a leaked one keeps in_use above 0 until the deadline).
    await waitFor(
      async () => (await (await s.get("/svc/health/ready")).json()).pool.in_use === 0,
      { what: "every pooled connection back" },
    );
    const ok = await s.post("/svc", { relation: "genre", limit: 1 });
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
  });
});
