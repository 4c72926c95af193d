/**
 * Streaming multipart decoding (src/http/multipart.ts) through a real HTTP server started here
 * (Deno.serve on 127.0.0.1:0 calling the module, since declared routes wire it in later): fields
 * and base64 files in memory; a 64 MB file streamed to disk byte-identical, written while it
 * arrives, with RSS growing less than its size; 1 GiB over the cap → 413 with flat memory and the partial file removed; too many
 * parts, no boundary, a truncated part, a stalled body; hostile file names never used as paths.
 */
import assert from "node:assert/strict";
import { multipartOptions, uploadDir } from "../../src/http/multipart.ts";
import { loadConfig } from "../../src/config/load.ts";
import { waitFor } from "../helpers/wait.ts";

const root = await Deno.makeTempDir({ prefix: "svc-upload-" });
const dir = `${root}/static/uploads`;
const MB = 1024 * 1024;

// The decoding server runs in a process of its own: its RSS is what the limits are about.
const child = new Deno.Command(Deno.execPath(), {
  args: ["run", "-A", new URL("../fixtures/multipart_server.ts", import.meta.url).pathname, dir],
  stdout: "piped",
  stderr: "inherit",
}).spawn();
const stdout = child.stdout.getReader();
const port = Number(new TextDecoder().decode((await stdout.read()).value).trim());
stdout.releaseLock();
child.stdout.cancel().catch(() => {});
const base = `http://127.0.0.1:${port}`;

/** The server process's resident set size. */
async function rss(): Promise<number> {
  return await (await fetch(base + "/rss")).json();
}

async function listDir(): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) out.push(e.name);
  } catch { /* not created yet */ }
  return out;
}

/** Deterministic pseudo-random bytes, chunk by chunk (xorshift32). */
function* noise(total: number, chunk = 64 * 1024, seed = 0x9e3779b9): Generator<Uint8Array> {
  let x = seed >>> 0;
  for (let sent = 0; sent < total; sent += chunk) {
    const n = Math.min(chunk, total - sent);
    const b = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      x ^= x << 13;
      x >>>= 0;
      x ^= x >>> 17;
      x ^= x << 5;
      x >>>= 0;
      b[i] = x & 0xff;
    }
    yield b;
  }
}

const enc = new TextEncoder();
const BOUNDARY = "----svcTestBoundary7MA4YWxkTrZu0gW";

/**
 * A streamed multipart body: a `title` field, then one file of `size` noise bytes. With `pause`,
 * the stream stops once `pause.at` file bytes are out and goes on when `pause.until()` resolves.
 */
function streamedBody(
  size: number,
  filename = "big.bin",
  pause?: { at: number; until: () => Promise<void> },
): ReadableStream<Uint8Array> {
  const gen = noise(size);
  let state = 0;
  let out = 0;
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      if (pause && state === 1 && out >= pause.at) {
        const p = pause;
        pause = undefined;
        await p.until();
      }
      if (state === 0) {
        state = 1;
        ctrl.enqueue(enc.encode(
          `--${BOUNDARY}\r\nContent-Disposition: form-data; name="title"\r\n\r\nholiday\r\n` +
            `--${BOUNDARY}\r\nContent-Disposition: form-data; name="upload"; filename="${filename}"\r\n` +
            `Content-Type: application/octet-stream\r\n\r\n`,
        ));
        return;
      }
      if (state === 1) {
        const n = gen.next();
        if (!n.done) {
          out += n.value.length;
          return ctrl.enqueue(n.value);
        }
        state = 2;
        ctrl.enqueue(enc.encode(`\r\n--${BOUNDARY}--\r\n`));
        return;
      }
      ctrl.close();
    },
  });
}

Deno.test("without streaming: fields are strings, files base64, repeated names an array", async () => {
  const form = new FormData();
  form.append("title", "déjà <vu>");
  form.append("tag", "a");
  form.append("tag", "b");
  form.append("doc", new File([new Uint8Array([0, 1, 2, 255])], "x.bin", { type: "image/png" }));
  const r = await fetch(base + "/buffer", { method: "POST", body: form });
  assert.equal(r.status, 200);
  assert.deepEqual(await r.json(), {
    title: "déjà <vu>",
    tag: ["a", "b"],
    doc: { filename: "x.bin", content_type: "image/png", size: 4, content_base64: "AAEC/w==" },
  });
  assert.deepEqual(await listDir(), []);
});

Deno.test("without streaming: a body over max_body_size → 413 before buffering it", async () => {
  const form = new FormData();
  form.append("doc", new File([new Uint8Array(200 * 1024)], "big.bin"));
  const r = await fetch(base + "/buffer", { method: "POST", body: form });
  assert.equal(r.status, 413);
  assert.equal((await r.json()).code, "HTTP_BODY_TOO_LARGE");
});

// Measured without warm-ups. Shown to fail when the body is buffered before it is written (the
// fixture server reading `await req.arrayBuffer()` and decoding a copy): nothing reaches the disk
// while the upload is paused, and the wait below times out; RSS then grows by more than the size.
Deno.test("a 64 MB upload streams to disk byte for byte: on disk as it arrives, RSS grows < its size", async () => {
  const size = 64 * MB;
  const half = 32 * MB;
  const partial = async () => {
    const names = await listDir();
    if (names.length !== 1) return 0;
    return (await Deno.stat(`${dir}/${names[0]}`)).size;
  };
  const before = await rss();
  let peak = before;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, await rss());
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  let onDisk = 0;
  const r = await fetch(base + "/large", {
    method: "POST",
    headers: { "content-type": `multipart/form-data; boundary=${BOUNDARY}` },
    body: streamedBody(size, "../../etc/passwd\u0000.png", {
      at: half,
      // Paused half way: the half sent is written out (less the decoder's small look-behind
      // for the boundary) before another byte is sent.
      until: async () => {
        onDisk = await waitFor(async () => {
          const n = await partial();
          return n >= half - MB ? n : 0;
        }, { what: "the first half of the upload on disk while the rest is unsent" });
      },
    }),
  });
  sampling = false;
  await sampler;
  peak = Math.max(peak, await rss());
  assert.ok(onDisk >= half - MB && onDisk <= half, `${onDisk} bytes on disk at the pause`);
  assert.equal(r.status, 200);
  const body = await r.json();
  assert.equal(body.title, "holiday");
  assert.equal(body.files.length, 1);
  const f = body.files[0];
  assert.equal(f.field, "upload");
  assert.equal(f.filename, "../../etc/passwd.png"); // plain text, NUL removed, never a path
  assert.equal(f.content_type, "application/octet-stream");
  assert.equal(f.size, size);
  assert.match(f.path, new RegExp(`^${dir}/[0-9a-f-]{36}$`));
  assert.ok(peak - before < size, `RSS grew by ${((peak - before) / MB).toFixed(1)} MB`);
  // Bytes on disk equal the bytes sent.
  const file = await Deno.open(f.path);
  const buf = new Uint8Array(64 * 1024);
  let off = 0;
  for (const expected of noise(size)) {
    let got = 0;
    while (got < expected.length) {
      const n = await file.read(buf.subarray(got, expected.length));
      assert.ok(n !== null);
      got += n;
    }
    assert.deepEqual(buf.subarray(0, expected.length), expected, `at byte ${off}`);
    off += expected.length;
  }
  assert.equal(await file.read(buf), null);
  file.close();
  await Deno.remove(f.path);
  assert.deepEqual(await listDir(), []);
});

async function writeAll(conn: Deno.Conn, b: Uint8Array): Promise<void> {
  for (let off = 0; off < b.length;) off += await conn.write(b.subarray(off));
}

/** Sends a chunked multipart upload over raw TCP until the server answers (or `total` is sent). */
async function rawUpload(path: string, total: number, extraHead = ""): Promise<{
  status: number;
  text: string;
  sent: number;
}> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const chunked = !/content-length/i.test(extraHead);
  await conn.write(enc.encode(
    `POST ${path} HTTP/1.1\r\nHost: x\r\n` +
      `Content-Type: multipart/form-data; boundary=${BOUNDARY}\r\n` +
      (chunked ? "Transfer-Encoding: chunked\r\n" : "") + extraHead + "\r\n",
  ));
  let text = "";
  const response = (async () => {
    const buf = new Uint8Array(16384);
    while (true) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) break;
      text += new TextDecoder().decode(buf.subarray(0, n));
      const end = text.indexOf("\r\n\r\n");
      const len = /\r\ncontent-length: (\d+)/i.exec(text);
      if (end >= 0 && len && text.length - end - 4 >= Number(len[1])) break;
    }
  })();
  let answered = false;
  response.then(() => (answered = true));
  const frame = (b: Uint8Array) =>
    chunked ? new Uint8Array([...enc.encode(b.length.toString(16) + "\r\n"), ...b, 13, 10]) : b;
  let sent = 0;
  try {
    const head = enc.encode(
      `--${BOUNDARY}\r\nContent-Disposition: form-data; name="f"; filename="big.bin"\r\n\r\n`,
    );
    if (total > 0) await writeAll(conn, frame(head));
    const block = new Uint8Array(256 * 1024).fill(0x61);
    const framed = frame(block);
    while (!answered && sent < total) {
      await Promise.race([writeAll(conn, framed), response]);
      sent += block.length;
    }
  } catch { /* the server closed the connection after answering */ }
  await response;
  conn.close();
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text, sent };
}

Deno.test("1 GiB over upload.max_size → 413 with flat memory, the partial file removed", async () => {
  const before = await rss();
  let peak = before;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, await rss());
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  const r = await rawUpload("/capped", 1024 * MB);
  sampling = false;
  await sampler;
  peak = Math.max(peak, await rss());
  assert.equal(r.status, 413);
  assert.match(r.text, /HTTP_BODY_TOO_LARGE/);
  assert.ok(r.sent < 64 * MB, `the client could send ${r.sent} bytes`);
  assert.ok(peak - before < 10 * MB, `RSS grew by ${((peak - before) / MB).toFixed(1)} MB`);
  assert.deepEqual(await listDir(), []);
  // Announced up front: refused before a byte of the body is read (none is ever sent; a server
  // waiting for the body would leave this hanging).
  const announced = await rawUpload("/capped", 0, `Content-Length: ${1024 * MB}\r\n`);
  assert.equal(announced.status, 413);
  assert.equal(announced.sent, 0);
  assert.deepEqual(await listDir(), []);
});

Deno.test("more than max_part_count parts → 413 HTTP_TOO_MANY_PARTS, files removed", async () => {
  const form = new FormData();
  for (let i = 0; i < 3; i++) form.append(`f${i}`, new File(["data"], `f${i}.txt`));
  for (let i = 0; i < 5; i++) form.append(`x${i}`, "v");
  const r = await fetch(base + "/stream", { method: "POST", body: form });
  assert.equal(r.status, 413);
  assert.equal(r.headers.get("x-svc-errorcode"), "HTTP_TOO_MANY_PARTS");
  await r.body?.cancel();
  assert.deepEqual(await listDir(), []);
});

Deno.test("no boundary, a truncated part, garbage → 400 HTTP_MULTIPART_INVALID, files removed", async () => {
  const cases: [string, string][] = [
    ["multipart/form-data", `--${BOUNDARY}\r\n`],
    [
      `multipart/form-data; boundary=${BOUNDARY}`,
      `--${BOUNDARY}\r\nContent-Disposition: form-data; name="f"; filename="a.txt"\r\n\r\npartial`,
    ],
    [`multipart/form-data; boundary=${BOUNDARY}`, "not a multipart body at all"],
    ["text/plain", "x"],
  ];
  for (const [ct, body] of cases) {
    const r = await fetch(base + "/stream", {
      method: "POST",
      headers: { "content-type": ct },
      body,
    });
    assert.equal(r.status, 400, ct + body);
    const j = await r.json();
    assert.equal(j.code, "HTTP_MULTIPART_INVALID");
    if (body.endsWith("partial")) assert.match(j.message, /truncated/);
  }
  assert.deepEqual(await listDir(), []);
});

Deno.test("a client stalling mid-upload → 408, its partial file removed", async () => {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(enc.encode(
    `POST /stall HTTP/1.1\r\nHost: x\r\nConnection: close\r\n` +
      `Content-Type: multipart/form-data; boundary=${BOUNDARY}\r\nContent-Length: 100000\r\n\r\n` +
      `--${BOUNDARY}\r\nContent-Disposition: form-data; name="f"; filename="a"\r\n\r\n` +
      "x".repeat(5000),
  ));
  // The partial file exists while streaming.
  await waitFor(async () => (await listDir()).length === 1, { what: "the partial file" });
  const buf = new Uint8Array(4096);
  const n = await conn.read(buf);
  const text = new TextDecoder().decode(buf.subarray(0, n ?? 0));
  conn.close();
  assert.match(text, /^HTTP\/1\.1 408/);
  assert.match(text, /HTTP_BODY_TIMEOUT/);
  assert.deepEqual(await listDir(), []);
});

Deno.test("uploads without http.upload.dir → 400 HTTP_UPLOAD_DISABLED", async () => {
  const r = await fetch(base + "/disabled", { method: "POST", body: new FormData() });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).code, "HTTP_UPLOAD_DISABLED");
  assert.equal(uploadDir("/srv/a:/srv/b", "up"), "/srv/a/up");
  const cfg = loadConfig({
    args: ["--http.static.path=/srv/a:/srv/b", "--http.upload.dir=up", "--http.max_part_count=7"],
    env: {},
  });
  assert.deepEqual(multipartOptions(cfg.http, true), {
    maxParts: 7,
    maxBodySize: 10 * MB,
    idleTimeoutMs: 30_000,
    stream: { dir: "/srv/a/up", maxSize: 10 * MB },
  });
  const off = loadConfig({ args: [], env: {} });
  assert.equal(multipartOptions(off.http, false).stream, undefined);
  assert.throws(() => multipartOptions(off.http, true), /uploads are disabled/);
});

Deno.test({
  name: "teardown",
  async fn() {
    child.kill("SIGTERM");
    await child.status;
    await Deno.remove(root, { recursive: true });
  },
});
