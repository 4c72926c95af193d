/**
 * Static files from `http.static.path` (colon-separated directories, first match wins): GET and
 * HEAD only, no dotfiles, nothing outside its directory (encoded separators, `..`, backslashes,
 * NUL and symlinks leading out are all 404), `index.html` for a directory, strong ETag with
 * `If-None-Match` → 304, `Last-Modified`/`If-Modified-Since`, one `Range` → 206 (unsatisfiable
 * → 416; a list of ranges is ignored and the whole file sent), files streamed from disk.
 */
import { SvcError } from "../svc_error.ts";
import { errorResponse } from "./error_response.ts";

const TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  htm: "text/html; charset=utf-8",
  css: "text/css; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  mjs: "text/javascript; charset=utf-8",
  json: "application/json",
  map: "application/json",
  txt: "text/plain; charset=utf-8",
  md: "text/markdown; charset=utf-8",
  csv: "text/csv; charset=utf-8",
  xml: "application/xml",
  svg: "image/svg+xml",
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  avif: "image/avif",
  ico: "image/x-icon",
  woff: "font/woff",
  woff2: "font/woff2",
  ttf: "font/ttf",
  otf: "font/otf",
  pdf: "application/pdf",
  wasm: "application/wasm",
  zip: "application/zip",
  gz: "application/gzip",
  mp4: "video/mp4",
  webm: "video/webm",
  mp3: "audio/mpeg",
  ogg: "audio/ogg",
  wav: "audio/wav",
};

/** The content type of a file name by its extension (`application/octet-stream` if unknown). */
export function contentTypeOf(name: string): string {
  const dot = name.lastIndexOf(".");
  return (dot >= 0 && TYPES[name.slice(dot + 1).toLowerCase()]) || "application/octet-stream";
}

/** The static directories of `http.static.path` (empty when unset). */
export function staticDirs(path: string | undefined): string[] {
  return (path ?? "").split(":").map((d) => d.trim()).filter((d) => d !== "");
}

/**
 * The path segments a URL path names, or null when it could escape or names a dotfile: raw or
 * encoded `/` or `\` inside a segment, NUL, `.`/`..`/any segment starting with a dot, or an
 * undecodable escape.
 */
export function safeSegments(rawPath: string): string[] | null {
  if (!rawPath.startsWith("/")) return null;
  const out: string[] = [];
  const raw = rawPath.split("/").slice(1);
  for (let i = 0; i < raw.length; i++) {
    const r = raw[i];
    if (r === "") {
      if (i === raw.length - 1) break; // trailing slash: a directory
      return null; // `//` never names a file of ours
    }
    let seg: string;
    try {
      seg = decodeURIComponent(r);
    } catch {
      return null;
    }
    // deno-lint-ignore no-control-regex
    if (seg.startsWith(".") || /[\/\\\0]/.test(seg) || /[\x00-\x1f]/.test(seg)) return null;
    out.push(seg);
  }
  return out;
}

/** The file a request names inside `dir` (resolving index.html), or null. */
async function locate(
  dir: string,
  segments: string[],
  directory: boolean,
): Promise<{ path: string; info: Deno.FileInfo } | null> {
  let root: string;
  try {
    root = await Deno.realPath(dir);
  } catch {
    return null;
  }
  let path = [root, ...segments].join("/");
  try {
    let info = await Deno.stat(path);
    if (info.isDirectory) {
      path += "/index.html";
      info = await Deno.stat(path);
    } else if (directory) return null; // `/page.html/` names a directory, not the file
    if (!info.isFile) return null;
    // A symlink anywhere on the way must not lead out of the directory.
    const real = await Deno.realPath(path);
    if (!real.startsWith(root + "/")) return null;
    const rel = real.slice(root.length + 1).split("/");
    if (rel.some((s) => s.startsWith("."))) return null;
    return { path: real, info };
  } catch {
    return null;
  }
}

/** A strong validator from size, modification time and inode. */
export function etagOf(info: Deno.FileInfo): string {
  const m = info.mtime?.getTime() ?? 0;
  return `"${info.size.toString(16)}-${m.toString(16)}-${(info.ino ?? 0).toString(16)}"`;
}

/** Whether an `If-None-Match` value matches `etag` (weak comparison, `*` matches). */
function noneMatch(header: string, etag: string): boolean {
  if (header.trim() === "*") return true;
  const bare = etag.replace(/^W\//, "");
  return header.split(",").some((t) => t.trim().replace(/^W\//, "") === bare);
}

/** A single byte range `[start, end]` (inclusive), "ignore" for lists/garbage, or "bad". */
export function parseRange(header: string, size: number): [number, number] | "ignore" | "bad" {
  const m = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header);
  if (!m) return "ignore"; // a list of ranges or another unit: served whole (RFC 9110 §14.2)
  const [, a, b] = m;
  if (a === "" && b === "") return "ignore";
  if (a === "") {
    const n = Number(b);
    if (n === 0 || size === 0) return "bad";
    return [Math.max(0, size - n), size - 1];
  }
  const start = Number(a);
  const end = b === "" ? size - 1 : Math.min(Number(b), size - 1);
  if (b !== "" && Number(b) < start) return "bad"; // reversed
  if (start >= size) return "bad";
  return [start, end];
}

/** A stream of `length` bytes of `file` from `start`, closing the file when done or cancelled. */
function rangeStream(file: Deno.FsFile, start: number, length: number): ReadableStream<Uint8Array> {
  let left = length;
  let positioned = start === 0;
  return new ReadableStream<Uint8Array>({
    type: "bytes",
    async pull(ctrl) {
      if (!positioned) {
        await file.seek(start, Deno.SeekMode.Start);
        positioned = true;
      }
      if (left <= 0) {
        file.close();
        ctrl.close();
        return;
      }
      const buf = new Uint8Array(Math.min(64 * 1024, left));
      const n = await file.read(buf);
      if (n === null || n === 0) {
        file.close();
        ctrl.close();
        return;
      }
      left -= n;
      ctrl.enqueue(buf.subarray(0, n));
    },
    cancel() {
      try {
        file.close();
      } catch { /* closed */ }
    },
  });
}

/**
 * Serves `req` from the static directories, or returns null when no file matches (the caller
 * answers 404). An unsatisfiable range is a 416 HTTP_RANGE_NOT_SATISFIABLE response.
 */
export async function serveStatic(dirs: string[], req: Request): Promise<Response | null> {
  if (dirs.length === 0 || (req.method !== "GET" && req.method !== "HEAD")) return null;
  // The path as sent; whatever URL parsing resolved or not, any dot segment is refused here.
  const rawPath = rawPathOf(req.url);
  const segments = safeSegments(rawPath);
  if (!segments) return null;
  const directory = rawPath.endsWith("/");
  for (const dir of dirs) {
    const found = await locate(dir, segments, directory);
    if (!found) continue;
    return respond(req, found.path, found.info);
  }
  return null;
}

/**
 * Whether `req`'s path names a file {@link serveStatic} would serve to a GET (any method): a
 * static file asked for with another method is 405, not 404.
 */
export async function isStaticFile(dirs: string[], req: Request): Promise<boolean> {
  const rawPath = rawPathOf(req.url);
  const segments = dirs.length ? safeSegments(rawPath) : null;
  if (!segments) return false;
  for (const dir of dirs) if (await locate(dir, segments, rawPath.endsWith("/"))) return true;
  return false;
}

/** The path of a URL as sent (before any dot-segment resolution). */
function rawPathOf(url: string): string {
  const afterScheme = url.indexOf("//");
  const start = url.indexOf("/", afterScheme + 2);
  if (start < 0) return "/";
  const end = url.slice(start).search(/[?#]/);
  return end < 0 ? url.slice(start) : url.slice(start, start + end);
}

async function respond(req: Request, path: string, info: Deno.FileInfo): Promise<Response> {
  const etag = etagOf(info);
  const headers = new Headers({
    "content-type": contentTypeOf(path),
    "etag": etag,
    "accept-ranges": "bytes",
    "cache-control": "no-cache",
  });
  if (info.mtime) headers.set("last-modified", info.mtime.toUTCString());
  const inm = req.headers.get("if-none-match");
  const ims = req.headers.get("if-modified-since");
  if (inm !== null ? noneMatch(inm, etag) : ims !== null && notModifiedSince(ims, info.mtime)) {
    headers.delete("content-type");
    return new Response(null, { status: 304, headers });
  }
  const size = info.size;
  let start = 0, end = size - 1, status = 200;
  const range = req.headers.get("range");
  const ifRange = req.headers.get("if-range");
  if (range !== null && (ifRange === null || ifRange.trim() === etag)) {
    const r = parseRange(range, size);
    if (r === "bad") {
      const err = new SvcError("HTTP_RANGE_NOT_SATISFIABLE", `range not satisfiable: ${range}`, {
        details: { size },
      });
      return errorResponse(err, { dev: false, anonymous: true }, {
        "content-range": `bytes */${size}`,
      });
    }
    if (r !== "ignore") {
      [start, end] = r;
      status = 206;
      headers.set("content-range", `bytes ${start}-${end}/${size}`);
    }
  }
  const length = Math.max(0, end - start + 1);
  headers.set("content-length", String(length));
  if (req.method === "HEAD") return new Response(null, { status, headers });
  const file = await Deno.open(path, { read: true });
  return new Response(rangeStream(file, start, length), { status, headers });
}

function notModifiedSince(header: string, mtime: Date | null): boolean {
  const since = Date.parse(header);
  if (!mtime || Number.isNaN(since)) return false;
  return Math.floor(mtime.getTime() / 1000) * 1000 <= since;
}
