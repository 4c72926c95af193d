/**
 * src/http/multipart.ts's decoding, in process: bodies built with FormData and cut into chunks of
 * random sizes (boundary-like bytes inside values, empty parts, non-ASCII names) decode to what
 * the platform's own parser (`Response.formData()`) reads; names are UTF-8; a field that is not
 * UTF-8 is 400 QUERY_INVALID.
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { decodeMultipart } from "../../src/http/multipart.ts";
import { SvcError } from "../../src/svc_error.ts";
import { encodeBase64 } from "../../src/http/base64.ts";

const OPTS = { maxParts: 1000, maxBodySize: 16 * 1024 * 1024 };

/** `bytes` as a request body arriving in chunks of the given sizes (cycled). */
function chunked(contentType: string, bytes: Uint8Array, sizes: number[]): Request {
  let off = 0;
  let k = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      if (off >= bytes.length) return c.close();
      const n = Math.max(1, sizes[k++ % sizes.length]);
      c.enqueue(bytes.slice(off, off + n));
      off += n;
    },
  });
  return new Request("http://x/", {
    method: "POST",
    body,
    headers: { "content-type": contentType },
  });
}

/** A FormData's wire form: content type and bytes. */
async function wire(form: FormData): Promise<{ type: string; bytes: Uint8Array<ArrayBuffer> }> {
  const r = new Response(form);
  return {
    type: r.headers.get("content-type")!,
    bytes: new Uint8Array(await r.arrayBuffer()),
  };
}

/** What the platform's parser reads, in decodeMultipart's shape. */
async function expected(
  type: string,
  bytes: Uint8Array<ArrayBuffer>,
): Promise<Record<string, unknown>> {
  const form = await new Response(bytes, { headers: { "content-type": type } }).formData();
  const out: Record<string, unknown> = {};
  for (const [name, v] of form) {
    const value = typeof v === "string" ? v : {
      filename: v.name,
      content_type: v.type,
      size: v.size,
      content_base64: encodeBase64(new Uint8Array(await v.arrayBuffer())),
    };
    const prev = out[name];
    out[name] = prev === undefined ? value : Array.isArray(prev) ? [...prev, value] : [prev, value];
  }
  return out;
}

// Values that look like the parser's own syntax: line breaks, dashes, boundary prefixes.
const tricky = fc.constantFrom("", "\r\n", "--", "\r\n--", "\r\n\r\n", "-", "\r", "\n", "é", "x");
const text = fc.array(fc.oneof(tricky, fc.string({ maxLength: 8 })), { maxLength: 12 })
  .map((a) => a.join(""));
const name = fc.constantFrom("a", "b", "déjà", "名前", "x y", 'a"b');
const part = fc.oneof(
  fc.record({ name, value: text }),
  fc.record({
    name,
    file: fc.uint8Array({ maxLength: 3000 }),
    filename: fc.constantFrom("a.bin", "résumé.pdf", "../../x", "with space.txt"),
    type: fc.constantFrom("application/octet-stream", "image/png", "text/plain"),
  }),
);

Deno.test("random forms cut at random places decode as the platform's parser reads them", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(part, { maxLength: 8 }),
      fc.array(fc.integer({ min: 1, max: 200 }), { minLength: 1, maxLength: 8 }),
      async (parts, sizes) => {
        const form = new FormData();
        for (const p of parts) {
          if ("value" in p) form.append(p.name, p.value);
          else {
            form.append(
              p.name,
              new File([p.file as Uint8Array<ArrayBuffer>], p.filename, { type: p.type }),
            );
          }
        }
        const { type, bytes } = await wire(form);
        const got = await decodeMultipart(chunked(type, bytes, sizes), OPTS);
        assert.deepEqual(got, await expected(type, bytes));
      },
    ),
    { numRuns: 150 },
  );
});

Deno.test("names are UTF-8; a field value that is not UTF-8 → 400 QUERY_INVALID", async () => {
  const enc = new TextEncoder();
  const head = (disposition: string) =>
    enc.encode(`--B\r\nContent-Disposition: form-data; ${disposition}\r\n\r\n`);
  const join = (...parts: Uint8Array[]) => {
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let off = 0;
    for (const p of parts) out.set(p, (off += p.length) - p.length);
    return out;
  };
  const ok = join(
    head('name="prénom"'),
    enc.encode("Zoë\r\n"),
    head('name="pièce"; filename="résumé.txt"'),
    enc.encode("x\r\n--B--\r\n"),
  );
  assert.deepEqual(
    await decodeMultipart(chunked("multipart/form-data; boundary=B", ok, [7]), OPTS),
    {
      prénom: "Zoë",
      pièce: {
        filename: "résumé.txt",
        content_type: "text/plain", // a part without Content-Type (RFC 7578)
        size: 1,
        content_base64: "eA==",
      },
    },
  );
  const bad = join(head('name="f"'), new Uint8Array([0xff, 0xfe]), enc.encode("\r\n--B--\r\n"));
  await assert.rejects(
    decodeMultipart(chunked("multipart/form-data; boundary=B", bad, [64]), OPTS),
    (e) => e instanceof SvcError && e.code === "QUERY_INVALID" && /not valid UTF-8/.test(e.message),
  );
});
