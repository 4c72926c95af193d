/**
 * Request bodies: size-capped reading (413 before buffering more than the cap), strict UTF-8
 * decoding (invalid bytes are 400 QUERY_INVALID, never replacement characters) and the JSON
 * content-type requirement of JSON endpoints (415 otherwise: a cross-site form or text/plain post
 * needs no CORS preflight, so accepting it would let any page act with a user's cookie).
 */
import type { ReceiveBudget } from "./body_budget.ts";
import { isExactNumber, parseJsonExact } from "../formats/json.ts";
import { SvcError } from "../svc_error.ts";
import { deadline } from "../util/deadline.ts";

/**
 * Throws 415 HTTP_UNSUPPORTED_MEDIA_TYPE unless the request says `application/json` (with no
 * charset, or UTF-8's).
 */
export function requireJson(req: Request): void {
  const type = req.headers.get("content-type") ?? "";
  if (type === "application/json") return;
  const essence = type.split(";")[0].trim().toLowerCase();
  if (essence !== "application/json") {
    throw new SvcError(
      "HTTP_UNSUPPORTED_MEDIA_TYPE",
      `expected Content-Type: application/json${type ? `, got ${type}` : ""}`,
    );
  }
  requireUtf8(type);
}

/**
 * Throws 415 HTTP_UNSUPPORTED_MEDIA_TYPE when a content type names a charset other than UTF-8
 * (bodies are read as UTF-8 only; a Latin-1 body would otherwise be "not valid UTF-8", or worse,
 * valid and misread).
 */
export function requireUtf8(contentType: string): void {
  const at = contentType.indexOf(";");
  if (at < 0) return;
  for (const param of contentType.slice(at + 1).split(";")) {
    const eq = param.indexOf("=");
    if (eq < 0 || param.slice(0, eq).trim().toLowerCase() !== "charset") continue;
    const value = param.slice(eq + 1).trim().replace(/^"(.*)"$/, "$1").toLowerCase();
    if (value !== "utf-8" && value !== "utf8") {
      throw new SvcError(
        "HTTP_UNSUPPORTED_MEDIA_TYPE",
        `unsupported charset "${value}": request bodies must be UTF-8`,
      );
    }
  }
}

/**
 * Throws 415 HTTP_UNSUPPORTED_MEDIA_TYPE for a body sent with a `Content-Encoding` (gzip, br, …):
 * svc reads bodies as they are, so a compressed one is refused by name rather than misread.
 */
export function requireIdentity(req: Request): void {
  const coding = req.headers.get("content-encoding");
  if (coding === null) return;
  const c = coding.trim().toLowerCase();
  if (c === "" || c === "identity") return;
  throw new SvcError(
    "HTTP_UNSUPPORTED_MEDIA_TYPE",
    `unsupported Content-Encoding "${coding}": send the body uncompressed`,
  );
}

/**
 * Bodies whose `Content-Length` announces at most this many bytes are read in one piece
 * (`Request.bytes()`: Deno hands over a body it already holds without building a stream; measured
 * ×0.97–0.98 svc CPU per primary-key read). Their idle limit is a limit on the whole body.
 */
export const WHOLE_BODY_MAX = 16 * 1024;

function unreadable(e: unknown): SvcError {
  // A broken or malformed body stream (bad chunked encoding, client gone) is the client's.
  return new SvcError(
    "QUERY_INVALID",
    `the request body could not be read: ${(e as Error).message}`,
  );
}

function tooLarge(maxBytes: number): SvcError {
  return new SvcError("HTTP_BODY_TOO_LARGE", `request body exceeds ${maxBytes} bytes`);
}

function timedOut(idleMs: number): SvcError {
  return new SvcError("HTTP_BODY_TIMEOUT", `request body stalled for ${idleMs} ms`);
}

/**
 * A small body with a known length (at most {@link WHOLE_BODY_MAX}, so hyper never passes more)
 * in one piece; with `idleMs`, 408 when it is not all there within that time (the read left
 * behind ends with the connection).
 */
function readWhole(req: Request, idleMs: number): Promise<Uint8Array> {
  if (idleMs <= 0) return req.bytes().catch((e) => Promise.reject(unreadable(e)));
  return new Promise((resolve, reject) => {
    const limit = deadline(idleMs, () => reject(timedOut(idleMs)));
    req.bytes().then((b) => {
      limit.clear();
      resolve(b);
    }, (e) => {
      limit.clear();
      reject(unreadable(e));
    });
  });
}

/**
 * Reads the whole body, at most `maxBytes` (413 HTTP_BODY_TOO_LARGE before buffering more). With
 * `idleMs`, a body that stalls that long between two chunks (checked every 100 ms) is 408
 * HTTP_BODY_TIMEOUT (a slow or malicious client never holds a pooled connection: bodies are read
 * before one is taken); a body announced at most {@link WHOLE_BODY_MAX} bytes long must arrive
 * whole within `idleMs`. A body with a `Content-Encoding` other than identity is 415. With
 * `receiving`, a streamed body's chunks count against the worker's receive budget while it
 * arrives (503 HTTP_BUSY beyond it).
 */
export function readBodyBytes(
  req: Request,
  maxBytes: number,
  idleMs = 0,
  receiving?: ReceiveBudget,
): Promise<Uint8Array> {
  try {
    requireIdentity(req);
  } catch (e) {
    return Promise.reject(e);
  }
  const len = Number(req.headers.get("content-length") ?? "NaN");
  if (len > maxBytes) return Promise.reject(tooLarge(maxBytes));
  if (len <= WHOLE_BODY_MAX) return readWhole(req, idleMs);
  // No length: a chunked body, whose other transfer codings (gzip, …) the server does not undo.
  if (Number.isNaN(len) && !plainTransfer(req.headers.get("transfer-encoding"))) {
    return Promise.reject(
      new SvcError(
        "HTTP_UNSUPPORTED_MEDIA_TYPE",
        `unsupported Transfer-Encoding "${req.headers.get("transfer-encoding")}": send the ` +
          "body uncompressed (chunked alone)",
      ),
    );
  }
  return readStream(req, maxBytes, idleMs, receiving);
}

/** Whether a `Transfer-Encoding` names no coding but `chunked` (and `identity`). */
function plainTransfer(te: string | null): boolean {
  if (te === null) return true;
  for (const t of te.split(",")) {
    const c = t.trim().toLowerCase();
    if (c !== "" && c !== "chunked" && c !== "identity") return false;
  }
  return true;
}

/** {@link readBodyBytes} of a body streamed in chunks. */
async function readStream(
  req: Request,
  maxBytes: number,
  idleMs: number,
  receiving?: ReceiveBudget,
): Promise<Uint8Array> {
  if (!req.body) return new Uint8Array(0);
  const reader = req.body.getReader();
  const held = receiving?.start();
  const chunks: Uint8Array[] = [];
  let n = 0;
  let stalled = false;
  // One shared timer checks the idle limit (src/util/deadline.ts), not a timer per chunk.
  const idle = idleMs > 0
    ? deadline(idleMs, () => {
      stalled = true;
      reader.cancel().catch(() => {}); // the pending read ends (done), then 408 below
    })
    : null;
  try {
    for (;;) {
      const r = await reader.read();
      if (stalled) throw timedOut(idleMs);
      if (r.done) break;
      idle?.extend(idleMs);
      n += r.value.length;
      if (n > maxBytes) throw tooLarge(maxBytes);
      held?.add(r.value.length);
      chunks.push(r.value);
    }
  } catch (e) {
    if (stalled) throw timedOut(idleMs);
    reader.cancel().catch(() => {});
    if (e instanceof SvcError) throw e;
    throw unreadable(e);
  } finally {
    idle?.clear();
    held?.end();
  }
  if (chunks.length === 1) return chunks[0];
  const buf = new Uint8Array(n);
  let o = 0;
  for (const c of chunks) {
    buf.set(c, o);
    o += c.length;
  }
  return buf;
}

const strict = new TextDecoder("utf-8", { fatal: true });
/** Invalid bytes become U+FFFD: ≈ 3× cheaper a call than the strict decoder (measured, Deno 2.9). */
const lenient = new TextDecoder();

/**
 * Bodies up to this many bytes that are all ASCII are decoded without TextDecoder. TextDecoder
 * costs ≈ 0.2 µs a call and ≈ 0.4 ns a byte, the JS loop ≈ 3 ns a byte: measured, the loop wins
 * below ≈ 80 bytes (a short GET-like body) and loses 5× on a 0.8 KiB nested write.
 */
export const ASCII_MAX = 64;

/** Decodes UTF-8 strictly: invalid bytes are 400 QUERY_INVALID. */
export function decodeUtf8(bytes: Uint8Array): string {
  if (bytes.length <= ASCII_MAX) {
    // ASCII fast path (a query is usually ASCII): valid UTF-8 as it is, one byte per character.
    let i = 0;
    while (i < bytes.length && bytes[i] < 0x80) i++;
    if (i === bytes.length) return String.fromCharCode.apply(null, bytes as unknown as number[]);
  }
  // Without a U+FFFD in the lenient result every byte was valid, and the text is the strict one;
  // with one (invalid bytes, or a real U+FFFD), the strict decoder decides.
  const text = lenient.decode(bytes);
  if (!text.includes("\uFFFD")) return text;
  try {
    return strict.decode(bytes);
  } catch {
    throw new SvcError("QUERY_INVALID", "request body is not valid UTF-8", {
      details: { pointer: "" },
    });
  }
}

/** Reads a body as strictly decoded UTF-8 text under `maxBytes` (and `idleMs`, see above). */
export async function readBodyText(req: Request, maxBytes: number, idleMs = 0): Promise<string> {
  return decodeUtf8(await readBodyBytes(req, maxBytes, idleMs));
}

/** Up to this `http.max_json_depth`, the depth check recurses (no allocation per value). */
const RECURSIVE_DEPTH_MAX = 512;

function tooDeep(maxDepth: number): SvcError {
  return new SvcError(
    "QUERY_INVALID",
    `request body is nested deeper than ${maxDepth} levels (http.max_json_depth)`,
    { details: { pointer: "", limit: "http.max_json_depth" } },
  );
}

/** Whether `v` holds arrays/objects nested deeper than `budget` levels (recursion ≤ budget + 1). */
function deeperThan(v: unknown, budget: number): boolean {
  if (v === null || typeof v !== "object" || isExactNumber(v)) return false;
  if (budget <= 0) return true;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const x = v[i];
      if (x !== null && typeof x === "object" && deeperThan(x, budget - 1)) return true;
    }
    return false;
  }
  for (const k in v) {
    const x = (v as Record<string, unknown>)[k];
    if (x !== null && typeof x === "object" && deeperThan(x, budget - 1)) return true;
  }
  return false;
}

/**
 * Parses JSON text (400 QUERY_INVALID when it is not JSON; a number a double cannot hold kept
 * exact, src/formats/json.ts) and refuses values nested deeper than
 * `maxDepth` arrays/objects (`http.max_json_depth`), so that a hostile body cannot exhaust the
 * stack of anything that walks it later (the check itself recurses at most `maxDepth` + 1 levels,
 * or, for a larger `maxDepth`, walks iteratively).
 */
export function parseJson(text: string, maxDepth: number): unknown {
  let value: unknown;
  try {
    value = parseJsonExact(text);
  } catch (e) {
    throw new SvcError("QUERY_INVALID", `request body is not valid JSON: ${(e as Error).message}`, {
      details: { pointer: "" },
    });
  }
  if (nestedDeeperThan(value, maxDepth)) throw tooDeep(maxDepth);
  return value;
}

/**
 * Whether `value` holds arrays/objects nested deeper than `maxDepth` levels (the rule of
 * `http.max_json_depth`, for a body and for the tree of a GET query string alike). Recurses at
 * most `maxDepth` + 1 levels, or, for a larger `maxDepth`, walks iteratively.
 */
export function nestedDeeperThan(value: unknown, maxDepth: number): boolean {
  if (maxDepth <= RECURSIVE_DEPTH_MAX) return deeperThan(value, maxDepth);
  if (!Number.isFinite(maxDepth)) return false;
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== "object" || isExactNumber(v)) continue;
    if (d > maxDepth) return true;
    for (const x of Array.isArray(v) ? v : Object.values(v)) {
      if (x !== null && typeof x === "object") stack.push([x, d + 1]);
    }
  }
  return false;
}

/**
 * Gathers key/value pairs (a query string, a urlencoded form, multipart fields) into a record,
 * repeated keys into arrays in their order: `a=1&a=2` → `{a: ["1", "2"]}`. Collected in a Map and
 * returned as own data properties (Object.fromEntries), so every key is the client's whatever its
 * name: `toString` or `constructor` is never read back as an earlier value (an inherited member),
 * and `__proto__` is a plain key.
 */
export function collectPairs<T>(pairs: Iterable<[string, T]>): Record<string, T | T[]> {
  const out = new Map<string, T | T[]>();
  for (const [k, v] of pairs) {
    const prev = out.get(k);
    if (prev === undefined) out.set(k, v);
    else if (Array.isArray(prev)) prev.push(v);
    else out.set(k, [prev, v]);
  }
  return Object.fromEntries(out);
}
