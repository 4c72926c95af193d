/**
 * HTTP surface through the real server: static files (first match wins, index.html, 304, 206,
 * 416, HEAD, traversal in every encoding → 404), CORS (preflight from allowed and refused
 * origins, `null`, `*`, closed by default), CSP with a fresh nonce on HTML, nosniff everywhere,
 * header-size limit, and a client stalling mid-body that holds no pool connection.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer, type TestServer } from "../helpers/server.ts";
import { waitFor } from "../helpers/wait.ts";
import { WHOLE_BODY_MAX } from "../../src/request/body.ts";
import { headerSize, rawHeaderList } from "../../src/http/surface.ts";

const root = await Deno.makeTempDir({ prefix: "svc-static-" });
const d1 = `${root}/one`, d2 = `${root}/two`, outside = `${root}/outside`;
for (const d of [d1, d2, `${d1}/sub`, outside, `${d1}/.hidden`]) await Deno.mkdir(d);
const TEXT = "hello world 0123456789";
await Deno.writeTextFile(`${d1}/a.txt`, TEXT);
await Deno.writeTextFile(`${d2}/a.txt`, "from the second directory");
await Deno.writeTextFile(`${d2}/only2.txt`, "only in two");
await Deno.writeTextFile(`${d1}/index.html`, "<!doctype html><title>root</title>");
await Deno.writeTextFile(`${d1}/sub/index.html`, "<!doctype html><title>sub</title>");
await Deno.writeTextFile(`${d1}/.env`, "SECRET=dotfile");
await Deno.writeTextFile(`${d1}/.hidden/x.txt`, "SECRET in a dot directory");
await Deno.writeTextFile(`${d1}/style.css`, "body{color:red}");
await Deno.writeTextFile(`${outside}/secret.txt`, "SECRET outside");
await Deno.symlink(`${outside}/secret.txt`, `${d1}/link.txt`);
await Deno.symlink(outside, `${d1}/linkdir`);
const big = new Uint8Array(3 * 1024 * 1024).map((_, i) => (i * 31 + 7) & 0xff);
await Deno.writeFile(`${d1}/big.bin`, big);

const uri = await chinookDb("surface");
const srv = await startServer(uri, [
  `--http.static.path=${d1}:${d2}`,
  "--http.cors.allowed_origins=https://app.example, https://other.example",
  "--http.csp.img_src='self' data:",
  "--http.max_header_size=8192",
  "--http.body_timeout=1",
  "--pg.pool_size=1",
]);
const star = await startServer(uri, ["--http.cors.allowed_origins=*"]);
const closed = await startServer(uri, [
  `--http.static.path=${d1}`,
  "--http.csp.policy=default-src 'none'; img-src https://img.example",
]);

/** Sends a request exactly as written (no client-side path normalisation). */
async function raw(server: TestServer, head: string, body = ""): Promise<{
  status: number;
  text: string;
}> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.server.port });
  await conn.write(new TextEncoder().encode(head + "\r\n" + body));
  let text = "";
  const buf = new Uint8Array(65536);
  const dec = new TextDecoder();
  // Read until the response is complete (the server may keep a half-sent request open).
  while (true) {
    const n = await conn.read(buf).catch(() => null);
    if (n === null) break;
    text += dec.decode(buf.subarray(0, n), { stream: true });
    const end = text.indexOf("\r\n\r\n");
    const len = /\r\ncontent-length: (\d+)/i.exec(text);
    if (end >= 0 && len && text.length - end - 4 >= Number(len[1])) break;
  }
  conn.close();
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text };
}

const get = (path: string, h: HeadersInit = {}) => srv.get(path, h);

Deno.test("static: first directory wins, second is a fallback, types and validators set", async () => {
  const a = await get("/a.txt");
  assert.equal(a.status, 200);
  assert.equal(await a.text(), TEXT);
  assert.equal(a.headers.get("content-type"), "text/plain; charset=utf-8");
  assert.match(a.headers.get("etag")!, /^"[0-9a-f]+-[0-9a-f]+-[0-9a-f]+"$/);
  assert.ok(a.headers.get("last-modified"));
  assert.equal(a.headers.get("x-content-type-options"), "nosniff");
  const two = await get("/only2.txt");
  assert.equal(await two.text(), "only in two");
  const css = await get("/style.css");
  assert.equal(css.headers.get("content-type"), "text/css; charset=utf-8");
  await css.body?.cancel();
  const bin = await get("/big.bin");
  assert.equal(bin.headers.get("content-type"), "application/octet-stream");
  assert.deepEqual(new Uint8Array(await bin.arrayBuffer()), big);
});

Deno.test("static: index.html for a directory, HEAD without body, other methods 405", async () => {
  for (const p of ["/", "/sub/", "/sub"]) {
    const r = await get(p);
    assert.equal(r.status, 200, p);
    assert.match(await r.text(), p === "/" ? /<title>root/ : /<title>sub/);
  }
  // A trailing slash names a directory: a file is not served under it.
  for (const p of ["/a.txt/", "/index.html/", "/sub/index.html/"]) {
    const r = await get(p);
    await r.body?.cancel();
    assert.equal(r.status, 404, p);
  }
  const h = await fetch(srv.url + "/a.txt", { method: "HEAD" });
  assert.equal(h.status, 200);
  assert.equal(h.headers.get("content-length"), String(TEXT.length));
  assert.equal(await h.text(), "");
  // A file asked for with another method: 405 with Allow (docs/http.md); nothing there: 404.
  for (const path of ["/a.txt", "/", "/sub/", "/only2.txt"]) {
    for (const method of ["POST", "PUT", "DELETE", "PATCH"]) {
      const p = await fetch(srv.url + path, { method, body: "x" });
      assert.equal(p.status, 405, `${method} ${path}`);
      assert.equal(p.headers.get("x-svc-errorcode"), "HTTP_METHOD_NOT_ALLOWED");
      assert.equal(p.headers.get("allow"), "GET, HEAD");
      await p.body?.cancel();
    }
  }
  for (const path of ["/nothing.txt", "/.env", "/link.txt"]) {
    const p = await fetch(srv.url + path, { method: "POST", body: "x" });
    assert.equal(p.status, 404, path);
    assert.equal(p.headers.get("x-svc-errorcode"), "HTTP_NOT_FOUND");
    await p.body?.cancel();
  }
});

Deno.test("a Host (or absolute target) that is no host name is 400: one path for every reader", async () => {
  // Found by a hostile client: `Host: x#` made the URL http://x#/private/f, served as the file
  // /private/f while middleware matching read the path `/`.
  for (
    const head of [
      "GET /only2.txt HTTP/1.1\r\nHost: x#\r\nConnection: close\r\n",
      "GET /only2.txt HTTP/1.1\r\nHost: x?\r\nConnection: close\r\n",
      "GET /only2.txt HTTP/1.1\r\nHost: a@b\r\nConnection: close\r\n",
      "GET /only2.txt HTTP/1.1\r\nHost: x\\y\r\nConnection: close\r\n",
      "GET http://x#/only2.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n",
    ]
  ) {
    const r = await raw(srv, head);
    // Refused by svc (400) or by the HTTP layer before it: never served.
    assert.ok(r.status === 400, `${JSON.stringify(head)}: ${r.status}`);
    assert.doesNotMatch(r.text, /only in two/);
  }
  const ok = await raw(
    srv,
    "GET /only2.txt HTTP/1.1\r\nHost: localhost:1\r\nConnection: close\r\n",
  );
  assert.equal(ok.status, 200);
  assert.match(ok.text, /only in two/);
});

Deno.test("svc's fixed paths: another method is 405 with Allow, not 404", async () => {
  for (
    const path of ["/svc/database.json", "/svc/health", "/svc/health/ready", "/svc/health/live"]
  ) {
    for (const method of ["POST", "PUT", "DELETE"]) {
      const r = await fetch(srv.url + path, { method, body: "{}" });
      assert.equal(r.status, 405, `${method} ${path}`);
      assert.equal(r.headers.get("x-svc-errorcode"), "HTTP_METHOD_NOT_ALLOWED");
      assert.equal(r.headers.get("allow"), "GET, HEAD");
      await r.body?.cancel();
    }
  }
  const svc = await fetch(srv.url + "/svc", { method: "PUT", body: "{}" });
  assert.equal(svc.status, 405);
  assert.equal(svc.headers.get("allow"), "GET, HEAD, POST");
  await svc.body?.cancel();
});

Deno.test("HEAD announces the GET's length, or none for a streamed answer", async () => {
  for (
    const path of [
      "/svc?relation=genre&limit=1",
      "/svc?relation=track&limit=2000",
      "/svc?relation=track&limit=2000",
      "/svc/database.json",
      "/svc/health",
      "/a.txt",
    ]
  ) {
    const g = await fetch(srv.url + path);
    const body = new Uint8Array(await g.arrayBuffer());
    const h = await fetch(srv.url + path, { method: "HEAD" });
    assert.equal(h.status, g.status, path);
    assert.equal(await h.text(), "", path);
    const length = h.headers.get("content-length");
    // A read larger than one fetch may stream (no length); a length given is the GET's.
    if (length !== null || !path.includes("limit=2000")) {
      assert.equal(length, String(body.length), path);
    }
  }
  // A streamed read (its answer's length is not known ahead): no length, never a wrong one.
  const streamed = "/svc?relation=track";
  const g = await fetch(srv.url + streamed);
  assert.equal(g.headers.get("content-length"), null);
  await g.body?.cancel();
  const h = await fetch(srv.url + streamed, { method: "HEAD" });
  assert.equal(h.status, 200);
  assert.equal(h.headers.get("content-length"), null);
  assert.equal(await h.text(), "");
});

Deno.test("static: If-None-Match and If-Modified-Since → 304", async () => {
  const a = await get("/a.txt");
  await a.body?.cancel();
  const etag = a.headers.get("etag")!;
  const r1 = await get("/a.txt", { "if-none-match": etag });
  assert.equal(r1.status, 304);
  assert.equal(await r1.text(), "");
  assert.equal(r1.headers.get("etag"), etag);
  const r2 = await get("/a.txt", { "if-none-match": `"other", ${etag}` });
  assert.equal(r2.status, 304);
  await r2.body?.cancel();
  const r3 = await get("/a.txt", { "if-none-match": '"other"' });
  assert.equal(r3.status, 200);
  await r3.body?.cancel();
  const r4 = await get("/a.txt", { "if-modified-since": a.headers.get("last-modified")! });
  assert.equal(r4.status, 304);
  await r4.body?.cancel();
  const r5 = await get("/a.txt", { "if-modified-since": new Date(0).toUTCString() });
  assert.equal(r5.status, 200);
  await r5.body?.cancel();
});

Deno.test("static: single Range → 206, unsatisfiable or reversed → 416, a list → whole file", async () => {
  const r = await get("/a.txt", { range: "bytes=0-4" });
  assert.equal(r.status, 206);
  assert.equal(r.headers.get("content-range"), `bytes 0-4/${TEXT.length}`);
  assert.equal(await r.text(), "hello");
  const tail = await get("/a.txt", { range: "bytes=-4" });
  assert.equal(tail.status, 206);
  assert.equal(await tail.text(), "6789");
  const open = await get("/a.txt", { range: "bytes=6-" });
  assert.equal(await open.text(), TEXT.slice(6));
  const bigRange = await get("/big.bin", { range: "bytes=1000000-1000999" });
  assert.equal(bigRange.status, 206);
  assert.deepEqual(new Uint8Array(await bigRange.arrayBuffer()), big.slice(1000000, 1001000));
  for (const range of ["bytes=100-200", "bytes=5-2", "bytes=-0"]) {
    const bad = await get("/a.txt", { range });
    assert.equal(bad.status, 416, range);
    assert.equal(bad.headers.get("content-range"), `bytes */${TEXT.length}`);
    assert.equal(bad.headers.get("x-svc-errorcode"), "HTTP_RANGE_NOT_SATISFIABLE");
    assert.equal((await bad.json()).code, "HTTP_RANGE_NOT_SATISFIABLE");
  }
  const list = await get("/a.txt", { range: "bytes=0-1,3-4" });
  assert.equal(list.status, 200);
  assert.equal(await list.text(), TEXT);
  const etag = (await get("/a.txt", { range: "bytes=0-0" })).headers.get("etag")!;
  const stale = await get("/a.txt", { range: "bytes=0-4", "if-range": '"stale"' });
  assert.equal(stale.status, 200);
  await stale.body?.cancel();
  const fresh = await get("/a.txt", { range: "bytes=0-4", "if-range": etag });
  assert.equal(fresh.status, 206);
  await fresh.body?.cancel();
});

Deno.test("static: traversal in every encoding, dotfiles, symlinks out and NUL → 404", async () => {
  const paths = [
    "/../outside/secret.txt",
    "/%2e%2e/outside/secret.txt",
    "/%2E%2E/outside/secret.txt",
    "/.%2e/outside/secret.txt",
    "/sub/../../outside/secret.txt",
    "/sub/%2e%2e/%2e%2e/outside/secret.txt",
    "/..%2foutside%2fsecret.txt",
    "/%2e%2e%2foutside%2fsecret.txt",
    "/%2e%2e%2Foutside%2Fsecret.txt",
    "/..%5coutside%5csecret.txt",
    "/..\\outside\\secret.txt",
    "/%252e%252e/outside/secret.txt",
    "/%c0%ae%c0%ae/outside/secret.txt",
    "/a.txt%00.html",
    "/a.txt%00",
    "/link.txt",
    "/linkdir/secret.txt",
    "/.env",
    "/%2eenv",
    "/.hidden/x.txt",
    "/%2ehidden/x.txt",
    "//etc/passwd",
    "/%2fetc/passwd",
  ];
  for (const p of paths) {
    const r = await raw(srv, `GET ${p} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n`);
    assert.doesNotMatch(r.text, /SECRET|root:/, p);
    // hyper refuses a few raw bytes itself (400); everything that reaches svc is 404.
    assert.ok(r.status === 404 || r.status === 400, `${p}: ${r.status}`);
    if (r.status === 404) assert.match(r.text, /HTTP_NOT_FOUND/, p);
  }
  // fetch normalises dot segments on the client side: still inside the directory.
  const n = await get("/sub/../a.txt");
  assert.equal(await n.text(), TEXT);
});

Deno.test("CORS: preflight from an allowed origin → 204 with every header", async () => {
  const r = await fetch(srv.url + "/svc", {
    method: "OPTIONS",
    headers: {
      origin: "https://app.example",
      "access-control-request-method": "POST",
      "access-control-request-headers": "content-type",
    },
  });
  assert.equal(r.status, 204);
  assert.equal(r.headers.get("access-control-allow-origin"), "https://app.example");
  assert.equal(r.headers.get("access-control-allow-credentials"), "true");
  assert.equal(
    r.headers.get("access-control-allow-methods"),
    "GET, POST, PUT, PATCH, DELETE, OPTIONS",
  );
  assert.match(r.headers.get("access-control-allow-headers")!, /\bcontent-type\b/);
  assert.equal(r.headers.get("access-control-max-age"), "600");
  assert.match(r.headers.get("vary")!, /Origin/);
  await r.body?.cancel();
});

Deno.test("CORS: refused origin, origin null and a closed server get no CORS header", async () => {
  for (
    const [server, origin] of [
      [srv, "https://evil.example"],
      [srv, "null"],
      [srv, "https://app.example.evil.example"],
      [closed, "https://app.example"],
      [star, "null"],
    ] as const
  ) {
    const pre = await fetch(server.url + "/svc", {
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": "POST" },
    });
    assert.equal(pre.status, 204);
    const acHeaders = [...pre.headers.keys()].filter((k) => k.startsWith("access-control-"));
    assert.deepEqual(acHeaders, [], origin);
    await pre.body?.cancel();
    const res = await server.post("/svc", { relation: "genre", limit: 1 }, { origin });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("access-control-allow-origin"), null, origin);
    await res.body?.cancel();
  }
});

Deno.test("CORS: actual requests from an allowed origin (query, static, errors); * has no credentials", async () => {
  const origin = "https://other.example";
  const q = await srv.post("/svc", { relation: "genre", limit: 1 }, { origin });
  assert.equal(q.status, 200);
  assert.equal(q.headers.get("access-control-allow-origin"), origin);
  assert.equal(q.headers.get("access-control-allow-credentials"), "true");
  assert.match(q.headers.get("vary")!, /Origin/);
  assert.match(q.headers.get("access-control-expose-headers")!, /X-Svc-Errorcode/);
  await q.body?.cancel();
  const s = await get("/a.txt", { origin });
  assert.equal(s.headers.get("access-control-allow-origin"), origin);
  await s.body?.cancel();
  const e = await srv.post("/svc", { relation: "nope" }, { origin });
  assert.equal(e.status, 404);
  assert.equal(e.headers.get("access-control-allow-origin"), origin);
  await e.body?.cancel();
  const any = await star.post("/svc", { relation: "genre", limit: 1 }, { origin });
  assert.equal(any.headers.get("access-control-allow-origin"), "*");
  assert.equal(any.headers.get("access-control-allow-credentials"), null);
  await any.body?.cancel();
  const pre = await fetch(star.url + "/svc", {
    method: "OPTIONS",
    headers: { origin, "access-control-request-method": "POST" },
  });
  assert.equal(pre.headers.get("access-control-allow-origin"), "*");
  assert.equal(pre.headers.get("access-control-allow-credentials"), null);
  await pre.body?.cancel();
});

Deno.test("CSP: HTML carries the configured policy plus a fresh nonce; JSON carries nosniff", async () => {
  const nonces = new Set<string>();
  for (let i = 0; i < 3; i++) {
    const r = await get("/");
    await r.body?.cancel();
    const csp = r.headers.get("content-security-policy")!;
    assert.match(csp, /^default-src 'self'; /);
    assert.match(csp, /img-src 'self' data:/);
    assert.match(csp, /object-src 'self'/);
    const m = /script-src 'self' 'nonce-([A-Za-z0-9+/=]{22,})'/.exec(csp);
    assert.ok(m, csp);
    assert.match(csp, new RegExp(`style-src 'self' 'nonce-${m[1].replace(/[+/]/g, "\\$&")}'`));
    nonces.add(m[1]);
  }
  assert.equal(nonces.size, 3);
  const txt = await get("/a.txt");
  assert.equal(txt.headers.get("content-security-policy"), null);
  await txt.body?.cancel();
  const json = await srv.post("/svc", { relation: "genre", limit: 1 });
  assert.equal(json.headers.get("x-content-type-options"), "nosniff");
  await json.body?.cancel();
  const verbatim = await closed.get("/");
  await verbatim.body?.cancel();
  assert.match(
    verbatim.headers.get("content-security-policy")!,
    /^default-src 'none'; img-src https:\/\/img\.example; script-src 'nonce-[^']+'; style-src 'nonce-[^']+'$/,
  );
});

Deno.test("limits: oversized headers → 431; a stalled body → 408 without holding the pool", async () => {
  const big = await get("/a.txt", { "x-big": "y".repeat(10000) });
  assert.equal(big.status, 431);
  assert.equal(big.headers.get("x-svc-errorcode"), "HTTP_HEADERS_TOO_LARGE");
  await big.body?.cancel();
  // pool_size=1: a client announcing 100 bytes and sending 10 must not block other queries.
  const stalled = raw(
    srv,
    "POST /svc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
      "Content-Length: 100\r\nConnection: close\r\n",
    '{"relation',
  );
  // The stalled request is inside the server, waiting for its body, and holds no pooled
  // connection meanwhile. Shown to fail when the body is read with a pooled connection already
  // taken (a lease held around readBodyText in handlePost): in_use is then 1.
  await waitFor(() => srv.server.runtime.inflight === 1, { what: "the stalled request in flight" });
  const ready = await (await srv.get("/svc/health/ready")).json();
  assert.equal(ready.pool.in_use, 0, JSON.stringify(ready.pool));
  assert.equal(srv.server.runtime.inflight, 1, "the stalled request is still waiting");
  for (let i = 0; i < 3; i++) {
    const ok = await srv.post("/svc", { relation: "genre", limit: 1 });
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
  }
  const s = await stalled;
  assert.equal(s.status, 408);
  assert.match(s.text, /HTTP_BODY_TIMEOUT/);
  // An announced body over the cap is refused before it is sent.
  const over = await raw(
    srv,
    "POST /svc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
      "Content-Length: 999999999\r\nConnection: close\r\n",
  );
  assert.equal(over.status, 413);
  assert.match(over.text, /HTTP_BODY_TOO_LARGE/);
});

Deno.test("limits: the header size counts every header as received — many small ones, repeated names", async () => {
  // limit 8192: 20 headers of 400 bytes are over it together, not one by one.
  const many: Record<string, string> = {};
  for (let i = 0; i < 20; i++) many[`x-h${i}`] = "v".repeat(400);
  const over = await get("/a.txt", many);
  assert.equal(over.status, 431);
  assert.equal(over.headers.get("x-svc-errorcode"), "HTTP_HEADERS_TOO_LARGE");
  await over.body?.cancel();
  const under = await get("/a.txt", Object.fromEntries(Object.entries(many).slice(0, 15)));
  assert.equal(under.status, 200);
  await under.body?.cancel();
  // One name sent 30 times (HTTP keeps every line): counted line by line.
  const line = `X-Rep: ${"r".repeat(300)}\r\n`;
  const rep = await raw(
    srv,
    "GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + line.repeat(30),
  );
  assert.equal(rep.status, 431);
  const few = await raw(
    srv,
    "GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + line.repeat(5),
  );
  assert.equal(few.status, 200);
});

Deno.test("limits: the header size is read from this Deno's own header list (no sorted copy)", async () => {
  // headerSize reads the request's list as Deno keeps it; were it not found (another Deno), the
  // limit would still hold through Headers iteration, but each request would pay Deno's sorted
  // copy (docs/performance.md). Served and constructed requests both give theirs.
  const ac = new AbortController();
  let seen: ReadonlyArray<readonly [string, string]> | undefined;
  let counted = -1;
  const server = Deno.serve(
    { port: 0, hostname: "127.0.0.1", signal: ac.signal, onListen() {} },
    (req) => {
      seen = rawHeaderList(req);
      counted = headerSize(req);
      return new Response("ok");
    },
  );
  const res = await fetch(`http://127.0.0.1:${server.addr.port}/`, {
    headers: [["X-One", "a"], ["x-one", "bb"], ["cookie", "c=d"]],
  });
  await res.body?.cancel();
  ac.abort();
  await server.finished;
  assert.ok(seen, "the served request's header list");
  const names = seen.map(([k]) => k.toLowerCase());
  assert.ok(names.includes("cookie") && names.includes("host"), names.join(","));
  assert.equal(counted, seen.reduce((n, [k, v]) => n + k.length + v.length + 4, 0));
  const built = new Request("http://x/", { headers: [["a", "1"], ["b", "22"]] });
  assert.deepEqual(rawHeaderList(built)?.map(([k, v]) => `${k}=${v}`), ["a=1", "b=22"]);
  assert.equal(headerSize(built), 1 + 1 + 4 + 1 + 2 + 4);
});

Deno.test("limits: bodies read as a stream (over 16 KiB, or chunked) → 408 when stalled; a large one is read whole", async () => {
  // Announced larger than WHOLE_BODY_MAX: read chunk by chunk, stalls after the first chunk.
  const prefix = '{"relation": "genre", "limit": 1, "x": "';
  const large = raw(
    srv,
    "POST /svc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
      `Content-Length: ${WHOLE_BODY_MAX + 100}\r\nConnection: close\r\n`,
    prefix,
  );
  // Chunked (no length): the same stream path.
  const chunked = raw(
    srv,
    "POST /svc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
      "Transfer-Encoding: chunked\r\nConnection: close\r\n",
    'a\r\n{"relation\r\n',
  );
  for (const stalled of [await large, await chunked]) {
    assert.equal(stalled.status, 408);
    assert.match(stalled.text, /HTTP_BODY_TIMEOUT/);
  }
  // A complete body over WHOLE_BODY_MAX is read and answered.
  const pad = "y".repeat(WHOLE_BODY_MAX + 100 - prefix.length - 2);
  const body = `${prefix}${pad}"}`;
  assert.equal(new TextEncoder().encode(body).length, WHOLE_BODY_MAX + 100);
  const whole = await raw(
    srv,
    "POST /svc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
      `Content-Length: ${WHOLE_BODY_MAX + 100}\r\nConnection: close\r\n`,
    body,
  );
  // Read and parsed: the unknown key "x" is the query's error, not the body's.
  assert.equal(whole.status, 400);
  assert.match(whole.text, /QUERY_INVALID/);
  assert.doesNotMatch(whole.text, /HTTP_BODY/);
});

Deno.test("one request path: /sv%63 is /svc; HEAD /svc is GET's status and headers, no body", async () => {
  const init = {
    method: "POST",
    headers: { "content-type": "application/json", origin: "https://app.example" },
    body: JSON.stringify({ relation: "genre", limit: 2 }),
  };
  const plain = await fetch(`${srv.url}/svc`, init);
  const encoded = await fetch(`${srv.url}/sv%63`, init);
  for (const res of [plain, encoded]) {
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("access-control-allow-origin"), "https://app.example");
    assert.equal(res.headers.get("x-content-type-options"), "nosniff");
    assert.equal((await res.json()).length, 2);
  }
  const head = await fetch(`${srv.url}/svc?relation=genre&limit=1`, { method: "HEAD" });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get("content-type"), "application/json");
  assert.match(head.headers.get("x-request-id") ?? "", /^[0-9a-f-]{36}$/);
  assert.equal(await head.text(), "");
});

Deno.test({
  name: "teardown",
  async fn() {
    await srv.stop();
    await star.stop();
    await closed.stop();
    await stopDb();
    await Deno.remove(root, { recursive: true });
  },
});
