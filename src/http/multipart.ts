/**
 * `multipart/form-data` decoded as a stream with `@mjackson/multipart-parser` (patched in
 * `patches/` with an `onContent` hook so a file part's bytes can go to disk instead of memory).
 * The body is read chunk by chunk under a byte cap (413 HTTP_BODY_TOO_LARGE before buffering
 * more), an idle timeout (408 HTTP_BODY_TIMEOUT) and a part cap (413 HTTP_TOO_MANY_PARTS).
 * Without `stream`, fields are strings and files `{filename, content_type, size,
 * content_base64}`; with it, every file part goes to `<dir>/<uuid>` and is listed in `files` as
 * `{field, filename, content_type, size, path}`. A failed decode removes every file it wrote.
 */
import {
  getMultipartBoundary,
  MultipartParser,
  type MultipartPart,
} from "@mjackson/multipart-parser";
import { SvcError } from "../svc_error.ts";
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
}

/** The patched parser's hook: return true when the chunk was taken (not buffered in the part). */
type ContentHook = (part: MultipartPart, chunk: Uint8Array) => boolean;

// deno-lint-ignore no-control-regex
const CONTROL = /[\x00-\x1f\x7f]/g;

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
  const boundary = getMultipartBoundary(ct);
  if (!boundary) {
    throw new SvcError("HTTP_MULTIPART_INVALID", "multipart/form-data without a boundary");
  }
  const cap = opts.stream ? opts.stream.maxSize : opts.maxBodySize;
  const tooLarge = () => new SvcError("HTTP_BODY_TOO_LARGE", `request body exceeds ${cap} bytes`);
  const announced = Number(req.headers.get("content-length") ?? "NaN");
  if (announced > cap) throw tooLarge();
  if (opts.stream) await Deno.mkdir(opts.stream.dir, { recursive: true });

  const parser = new MultipartParser(boundary, {
    maxHeaderSize: 8 * 1024,
    maxFileSize: Number.MAX_SAFE_INTEGER,
  });
  const seen = new Set<MultipartPart>();
  const count = (part: MultipartPart) => {
    if (seen.has(part)) return;
    seen.add(part);
    if (seen.size > opts.maxParts) {
      throw new SvcError(
        "HTTP_TOO_MANY_PARTS",
        `more than ${opts.maxParts} multipart parts (http.max_part_count)`,
      );
    }
  };
  const streamed = (part: MultipartPart) => opts.stream !== undefined && part.isFile;
  /** Chunks of streamed parts waiting to be written, in order. */
  const queue: { part: MultipartPart; chunk: Uint8Array }[] = [];
  const open = new Map<MultipartPart, { file: Deno.FsFile; stored: StoredFile }>();
  const stored: StoredFile[] = [];
  const hook: ContentHook = (part, chunk) => {
    count(part);
    // Chunks may be views of a reused read buffer: in-memory parts keep a copy.
    if (!streamed(part)) part.content.push(chunk.slice());
    else queue.push({ part, chunk });
    return true;
  };
  (parser as unknown as { onContent: ContentHook }).onContent = hook;

  const target = (part: MultipartPart) => {
    let t = open.get(part);
    if (!t) {
      const path = `${opts.stream!.dir.replace(/\/+$/, "")}/${crypto.randomUUID()}`;
      const file = Deno.openSync(path, { write: true, createNew: true, mode: 0o640 });
      const s: StoredFile = {
        field: fieldName(part),
        filename: cleanName(part.filename ?? ""),
        content_type: part.mediaType ?? "application/octet-stream",
        size: 0,
        path,
      };
      stored.push(s);
      t = { file, stored: s };
      open.set(part, t);
    }
    return t;
  };
  const flush = async () => {
    while (queue.length > 0) {
      const { part, chunk } = queue.shift()!;
      const t = target(part);
      await writeAll(t.file, chunk);
      t.stored.size += chunk.length;
    }
  };
  const body: MultipartBody = {};
  const finishPart = (part: MultipartPart) => {
    count(part);
    if (streamed(part)) {
      const t = target(part); // an empty file part still gets its (empty) file
      t.file.close();
      open.delete(part);
      return;
    }
    const name = fieldName(part);
    let value: unknown;
    if (part.isFile) {
      value = {
        filename: cleanName(part.filename ?? ""),
        content_type: part.mediaType ?? "application/octet-stream",
        size: part.size,
        content_base64: encodeBase64(part.bytes),
      } satisfies BufferedFile;
    } else {
      try {
        value = part.text;
      } catch {
        throw new SvcError("QUERY_INVALID", `multipart field ${name} is not valid UTF-8`);
      }
    }
    const prev = body[name];
    if (prev === undefined) body[name] = value;
    else if (Array.isArray(prev)) prev.push(value);
    else body[name] = [prev, value];
  };

  if (!req.body) throw new SvcError("HTTP_MULTIPART_INVALID", "multipart body is empty");
  const reader = bodyReader(req.body);
  let total = 0;
  try {
    while (true) {
      const { done, value } = await readWithTimeout(reader, opts.idleTimeoutMs ?? 30_000);
      if (done || !value) break;
      total += value.length;
      if (total > cap) throw tooLarge();
      for (const part of parser.write(value)) {
        await flush();
        finishPart(part);
      }
      await flush();
    }
    parser.finish();
  } catch (e) {
    reader.cancel().catch(() => {});
    for (const { file } of open.values()) {
      try {
        file.close();
      } catch { /* closed */ }
    }
    await removeFiles(stored);
    throw toError(e);
  }
  if (opts.stream) body.files = stored;
  return body;
}

/** Parser failures become 400 HTTP_MULTIPART_INVALID; service errors pass through. */
function toError(e: unknown): unknown {
  if (e instanceof SvcError) return e;
  const name = (e as Error)?.name ?? "";
  if (/^(Multipart|MaxHeader|MaxFile)/.test(name)) {
    const msg = (e as Error).message;
    return new SvcError(
      "HTTP_MULTIPART_INVALID",
      msg === "Multipart stream not finished"
        ? "multipart body truncated: the closing boundary is missing"
        : `invalid multipart body: ${msg}`,
    );
  }
  return e;
}

function fieldName(part: MultipartPart): string {
  return cleanName(part.name ?? "");
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
  // Two buffers: the parser may keep a view of the previous chunk until the next write, so a
  // buffer is reused only every other read (a BYOB read detaches the buffer it is given).
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
