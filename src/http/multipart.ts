/**
 * `multipart/form-data` decoded as a stream with `@fastify/busboy`: every part's bytes are taken
 * as they arrive, a file part's written to disk chunk by chunk when streaming. The body is read
 * chunk by chunk under a byte cap (413 HTTP_BODY_TOO_LARGE before buffering more), an idle timeout
 * (408 HTTP_BODY_TIMEOUT) and a part cap (413 HTTP_TOO_MANY_PARTS); the parser takes the next chunk
 * only once the parts have taken the previous one. Without `stream`, fields are strings and files
 * `{filename, content_type, size, content_base64}`; with it, every file part goes to
 * `<dir>/<uuid>` and is listed in `files` as `{field, filename, content_type, size, path}`. A part
 * is a file when it has a filename; names are read as UTF-8, a field's value must be UTF-8, a part
 * without Content-Type is `text/plain` (RFC 7578). A part's header block over 8 KiB is 400
 * HTTP_MULTIPART_INVALID (the parser would cut it silently). A failed decode removes every file it
 * wrote.
 */
import type { ReceiveBudget } from "../request/body_budget.ts";
import { recordUploads } from "./uploads.ts";
import { Busboy, type BusboyInstance } from "@fastify/busboy";
import { SvcError } from "../svc_error.ts";
import { collectPairs } from "../request/body.ts";
import { encodeBase64 } from "./base64.ts";

/** A file part kept in memory. */
export interface BufferedFile {
  filename: string;
  content_type: string;
  size: number;
  content_base64: string;
}

/** A file part streamed to disk. */
export interface StoredFile {
  field: string;
  filename: string;
  content_type: string;
  size: number;
  /** Absolute path of the stored file: `<dir>/<uuid>` (never derived from the client's name). */
  path: string;
}

/** The decoded body: fields by name (a repeated name becomes an array), plus `files` when streaming. */
export type MultipartBody = Record<string, unknown> & { files?: StoredFile[] };

/** Limits and the streaming target. */
export interface MultipartOptions {
  /** `http.max_part_count`. */
  maxParts: number;
  /** `http.max_body_size`: the cap of a body that is not streamed to disk. */
  maxBodySize: number;
  /** Stream file parts to `dir` (created when missing) under `maxSize` (`http.upload.max_size`). */
  stream?: { dir: string; maxSize: number };
  /** Longest wait for the next body chunk, in ms (default 30 000). */
  idleTimeoutMs?: number;
  /**
   * The worker's receive budget: a body held in memory (not streamed to disk) counts against it
   * while it arrives, as a JSON body does (src/request/body_budget.ts).
   */
  receiving?: ReceiveBudget;
}

// deno-lint-ignore no-control-regex
const CONTROL = /[\x00-\x1f\x7f]/g;

/** The longest header block of one part, in bytes (8 KiB). */
export const PART_HEADER_MAX = 8 * 1024;

/** The part-header parser inside busboy (@fastify/busboy 3.2.6: busboy → Multipart → Dicer). */
interface HeaderParser {
  /** Set once the header block reached the parser's size limit (the rest is dropped). */
  maxed: boolean;
  _finish(): void;
}

/**
 * Calls `over` when a part's header block reaches the parser's limit, before the parser emits
 * the cut header: busboy drops the bytes beyond it without a word. The parser is an internal of
 * the pinned version; if it is not where it was, decoding refuses to run (an upgrade must look).
 */
function watchHeaderSize(parser: BusboyInstance, over: () => void): void {
  const hp = (parser as unknown as { _parser?: { parser?: { _hparser?: HeaderParser } } })
    ._parser?.parser?._hparser;
  if (!hp || typeof hp._finish !== "function" || typeof hp.maxed !== "boolean") {
    throw new Error("@fastify/busboy's header parser moved: check the part header limit");
  }
  const finish = hp._finish;
  hp._finish = function (this: HeaderParser) {
    if (this.maxed) over();
    finish.call(this);
  };
}

/** Whether a request announces multipart/form-data. */
export function isMultipart(req: Request): boolean {
  return /^\s*multipart\/form-data\b/i.test(req.headers.get("content-type") ?? "");
}

/**
 * The upload directory `<first static dir>/<http.upload.dir>`; 400 HTTP_UPLOAD_DISABLED while
 * either is unset.
 */
export function uploadDir(staticPath: string | undefined, dir: string | undefined): string {
  const first = (staticPath ?? "").split(":").map((d) => d.trim()).find((d) => d !== "");
  if (!dir || !first) {
    throw new SvcError(
      "HTTP_UPLOAD_DISABLED",
      "uploads are disabled: set http.upload.dir (and http.static.path)",
    );
  }
  return `${first.replace(/\/+$/, "")}/${dir.replace(/^\/+/, "")}`;
}

/** Removes stored files (best effort); for callers whose later step failed. */
export async function removeFiles(files: StoredFile[]): Promise<void> {
  await Promise.all(files.map((f) => Deno.remove(f.path).catch(() => {})));
}

/** Decodes a multipart/form-data request (see the module comment). */
export async function decodeMultipart(
  req: Request,
  opts: MultipartOptions,
): Promise<MultipartBody> {
  const ct = req.headers.get("content-type") ?? "";
  if (!isMultipart(req)) {
    throw new SvcError("HTTP_MULTIPART_INVALID", "the body is not multipart/form-data");
  }
  const cap = opts.stream ? opts.stream.maxSize : opts.maxBodySize;
  const tooLarge = () => new SvcError("HTTP_BODY_TOO_LARGE", `request body exceeds ${cap} bytes`);
  let parser: BusboyInstance;
  try {
    parser = Busboy({
      headers: { "content-type": ct },
      preservePath: true, // the client's file name is kept as text (never used as a path)
      isPartAFile: () => true, // every part as bytes: a field's text is decoded here, strictly
      limits: { parts: opts.maxParts, headerSize: PART_HEADER_MAX + 1 },
    });
  } catch {
    throw new SvcError("HTTP_MULTIPART_INVALID", "multipart/form-data without a boundary");
  }
  const announced = Number(req.headers.get("content-length") ?? "NaN");
  if (announced > cap) throw tooLarge();
  if (!req.body) throw new SvcError("HTTP_MULTIPART_INVALID", "multipart body is empty");
  if (opts.stream) await Deno.mkdir(opts.stream.dir, { recursive: true });

  /** The first failure (of the parser or a part); every wait below ends on it. */
  const failed = Promise.withResolvers<never>();
  let failure: unknown = undefined;
  const fail = (e: unknown) => {
    if (failure !== undefined) return;
    failure = e;
    failed.reject(e);
  };
  failed.promise.catch(() => {});
  watchHeaderSize(parser, () =>
    fail(
      new SvcError(
        "HTTP_MULTIPART_INVALID",
        `a multipart part header is over ${PART_HEADER_MAX} bytes`,
      ),
    ));
  const stored: StoredFile[] = [];
  const open = new Set<Deno.FsFile>();
  /** Each part's name and value, in part order (streamed file parts have none). */
  const values: ({ name: string; value: unknown } | null)[] = [];
  /**
   * Chunks of streamed file parts waiting to be written, in order (views of the read buffer: they
   * are written before that buffer is read into again); `null` closes the part's file.
   */
  const queue: { file: Deno.FsFile; stored: StoredFile; chunk: Uint8Array | null }[] = [];

  parser.on("partsLimit", () =>
    fail(
      new SvcError(
        "HTTP_TOO_MANY_PARTS",
        `more than ${opts.maxParts} multipart parts (http.max_part_count)`,
      ),
    ));
  parser.on("error", (e: unknown) => fail(invalid(e)));
  parser.on("file", (field, stream, rawFilename, _encoding, mimeType) => {
    const index = values.push(null) - 1;
    const name = cleanName(utf8(field ?? ""));
    const filename = rawFilename === undefined ? undefined : cleanName(utf8(rawFilename));
    stream.on("error", (e: unknown) => fail(invalid(e)));
    if (opts.stream && filename !== undefined) {
      const path = `${opts.stream.dir.replace(/\/+$/, "")}/${crypto.randomUUID()}`;
      const file = Deno.openSync(path, { write: true, createNew: true, mode: 0o640 });
      open.add(file);
      const s: StoredFile = { field: name, filename, content_type: mimeType, size: 0, path };
      stored.push(s);
      stream.on("data", (chunk: Uint8Array) => queue.push({ file, stored: s, chunk }));
      stream.on("end", () => queue.push({ file, stored: s, chunk: null }));
      return;
    }
    const kept: Uint8Array[] = [];
    let size = 0;
    // A copy: the chunk is a view of the read buffer, which is read into again.
    stream.on("data", (chunk: Uint8Array) => {
      kept.push(chunk.slice());
      size += chunk.length;
    });
    stream.on("end", () => {
      const bytes = concat(kept, size);
      if (filename !== undefined) {
        const value: BufferedFile = {
          filename,
          content_type: mimeType,
          size,
          content_base64: encodeBase64(bytes),
        };
        values[index] = { name, value };
        return;
      }
      try {
        values[index] = { name, value: new TextDecoder("utf-8", { fatal: true }).decode(bytes) };
      } catch {
        fail(new SvcError("QUERY_INVALID", `multipart field ${name} is not valid UTF-8`));
      }
    });
  });

  const flush = async () => {
    while (queue.length > 0) {
      const { file, stored, chunk } = queue.shift()!;
      if (chunk === null) {
        open.delete(file);
        file.close();
        continue;
      }
      await writeAll(file, chunk);
      stored.size += chunk.length;
    }
  };
  const finished = new Promise<void>((resolve) => parser.on("finish", () => resolve()));
  const write = (chunk: Uint8Array) =>
    new Promise<void>((resolve, reject) =>
      parser.write(chunk, (e?: Error | null) => (e ? reject(invalid(e)) : resolve()))
    );
  const reader = bodyReader(req.body);
  let total = 0;
  const held = opts.stream ? undefined : opts.receiving?.start();
  try {
    while (true) {
      const { done, value } = await Promise.race([
        readWithTimeout(reader, opts.idleTimeoutMs ?? 30_000),
        failed.promise,
      ]);
      if (done || !value) break;
      total += value.length;
      if (total > cap) throw tooLarge();
      held?.add(value.length);
      await Promise.race([write(value), failed.promise]);
      await flush();
    }
    parser.end();
    await Promise.race([finished, failed.promise]);
    await flush();
    if (failure !== undefined) throw failure;
  } catch (e) {
    fail(e);
    reader.cancel().catch(() => {});
    parser.destroy();
    for (const file of open) {
      try {
        file.close();
      } catch { /* closed */ }
    }
    await removeFiles(stored);
    throw failure;
  } finally {
    held?.end();
  }
  // Own keys whatever their names (`toString`, `__proto__`).
  const body: MultipartBody = collectPairs(
    values.filter((v) => v !== null).map((v) => [v.name, v.value]),
  );
  if (opts.stream) {
    body.files = stored;
    // What a failed request may remove: these paths, never ones read from a body.
    recordUploads(body, stored.map((f) => f.path));
  }
  return body;
}

/** A parser failure as 400 HTTP_MULTIPART_INVALID (service errors pass through). */
function invalid(e: unknown): unknown {
  if (e instanceof SvcError) return e;
  const msg = e instanceof Error ? e.message : String(e);
  return new SvcError(
    "HTTP_MULTIPART_INVALID",
    /unexpected end|terminated early/i.test(msg)
      ? "multipart body truncated: the closing boundary is missing"
      : `invalid multipart body: ${msg}`,
  );
}

/**
 * A name from a part's headers as UTF-8 (the parser reads header bytes one character each); a
 * name that does not decode as UTF-8 (or was decoded already, from `filename*`) is kept.
 */
function utf8(s: string): string {
  // deno-lint-ignore no-control-regex
  if (!/[\x80-\xff]/.test(s) || /[^\x00-\xff]/.test(s)) return s;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(
      Uint8Array.from(s, (c) => c.charCodeAt(0)),
    );
  } catch {
    return s;
  }
}

function concat(chunks: Uint8Array[], size: number): Uint8Array {
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** A client-given name as plain text: control characters (NUL included) removed. */
function cleanName(s: string): string {
  return s.replace(CONTROL, "");
}

async function writeAll(file: Deno.FsFile, chunk: Uint8Array): Promise<void> {
  let off = 0;
  while (off < chunk.length) off += await file.write(chunk.subarray(off));
}

/** Reads a body; a byte stream is read into two alternating buffers (no garbage per chunk). */
interface ChunkReader {
  read(): Promise<ReadableStreamReadResult<Uint8Array>>;
  cancel(): Promise<void>;
}

const READ_SIZE = 64 * 1024;

function bodyReader(body: ReadableStream<Uint8Array>): ChunkReader {
  let byob: ReadableStreamBYOBReader;
  try {
    byob = body.getReader({ mode: "byob" });
  } catch {
    return body.getReader();
  }
  // Two buffers: the parts take a chunk's bytes (copied, or written to disk) while the next chunk
  // is read, so a buffer is reused only every other read (a BYOB read detaches the buffer it is
  // given).
  const bufs = [new Uint8Array(READ_SIZE), new Uint8Array(READ_SIZE)];
  let i = 0;
  return {
    async read() {
      const r = await byob.read(bufs[i]);
      if (r.value) bufs[i] = new Uint8Array(r.value.buffer, 0, READ_SIZE);
      i ^= 1;
      return r as ReadableStreamReadResult<Uint8Array>;
    },
    cancel: () => byob.cancel(),
  };
}

async function readWithTimeout(
  reader: ChunkReader,
  ms: number,
): Promise<ReadableStreamReadResult<Uint8Array>> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      reader.read().catch((e) => {
        // A broken body (bad chunked framing, the client went away) is the client's fault.
        throw new SvcError("HTTP_MULTIPART_INVALID", `request body could not be read: ${e}`);
      }),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(
              new SvcError("HTTP_BODY_TIMEOUT", `no request body data for ${ms} ms`),
            ),
          ms,
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The decode options of a declared route from the configuration: `http.max_part_count`,
 * `http.max_body_size`, `http.body_timeout`, and with `streamUpload` the upload directory
 * (400 HTTP_UPLOAD_DISABLED while `http.upload.dir` is unset) under `http.upload.max_size`.
 */
export function multipartOptions(
  http: {
    max_part_count: number;
    max_body_size: number;
    body_timeout: number;
    static: { path?: string };
    upload: { dir?: string; max_size?: number };
  },
  streamUpload: boolean,
): MultipartOptions {
  const opts: MultipartOptions = {
    maxParts: http.max_part_count,
    maxBodySize: http.max_body_size,
    idleTimeoutMs: http.body_timeout > 0 ? http.body_timeout * 1000 : 2 ** 31 - 1,
  };
  if (streamUpload) {
    opts.stream = {
      dir: uploadDir(http.static.path, http.upload.dir),
      maxSize: http.upload.max_size ?? http.max_body_size,
    };
  }
  return opts;
}
