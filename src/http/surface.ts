/**
 * The first step of every request (src/http/server.ts): the header-size limit (431) and the
 * answer to a CORS preflight (not under `/auth/`). The body's idle timeout (408) is applied where
 * bodies are read (readBodyBytes, and decodeMultipart with its own), not by wrapping every
 * request's stream here: measured, the wrapper cost a quarter of a primary-key read's throughput.
 * The way out is src/http/decorate.ts.
 */
import type { Config } from "../config/load.ts";
import { SvcError } from "../svc_error.ts";
import { corsApplies, isPreflight, preflight } from "./cors.ts";
import { errorResponse } from "./error_response.ts";

/**
 * The surface's answer before the request proper: 431 for oversized headers, or the answer to a
 * CORS preflight; null to proceed.
 */
export function surface(cfg: Config, req: Request, path: string): Response | null {
  if (headerSize(req) > cfg.http.max_header_size) {
    return finish(
      errorResponse(
        new SvcError(
          "HTTP_HEADERS_TOO_LARGE",
          `request headers exceed ${cfg.http.max_header_size} bytes`,
        ),
        { dev: cfg.dev, anonymous: true },
      ),
    );
  }
  if (oddAuthority(req.url)) {
    return finish(
      errorResponse(
        new SvcError(
          "QUERY_INVALID",
          "the request's host (Host header or absolute target) is not a host name",
        ),
        { dev: cfg.dev, anonymous: true },
      ),
    );
  }
  if (corsApplies(path) && isPreflight(req)) return finish(preflight(cfg.http.cors, req));
  return null;
}

/**
 * Whether the URL's authority (the `Host` header, or an absolute request target) holds a
 * character no host name has. The URL is the host and target joined, so `Host: x#` made
 * `http://x#/private/f`: read as path `/private/f` by one reader, `/` (and a fragment) by
 * another, a request for a file a middleware guards matched no middleware.
 */
export function oddAuthority(url: string): boolean {
  const from = url.indexOf("//") + 2;
  const to = url.indexOf("/", from);
  for (let i = from, end = to < 0 ? url.length : to; i < end; i++) {
    const c = url.charCodeAt(i);
    // # ? @ \ space and controls
    if (c === 35 || c === 63 || c === 64 || c === 92 || c <= 32 || c === 127) return true;
  }
  return false;
}

/**
 * The headers' size as the limit counts it: each name and value as received plus 4 bytes (": "
 * and CRLF). Read from the request's own header list when Deno keeps one where
 * {@link rawHeaderList} finds it: `Headers` iteration sorts and combines every header into a new
 * list first (measured: ≈ 2 KB and ≈ 5% of a primary-key read's CPU; docs/performance.md, "The
 * primary-key read's own work"). Otherwise through `forEach` (combined values: a repeated header
 * counts its name once).
 */
export function headerSize(req: Request): number {
  const list = rawHeaderList(req);
  if (list === undefined) {
    size = 0;
    req.headers.forEach(addHeader);
    return size;
  }
  let n = 0;
  for (let i = 0; i < list.length; i++) {
    const pair = list[i];
    n += pair[0].length + pair[1].length + 4;
  }
  return n;
}

let size = 0;
const addHeader = (v: string, k: string) => {
  size += k.length + v.length + 4;
};

/** The key under which Deno's `Request` keeps its inner request; null once known to be absent. */
let innerKey: symbol | null | undefined;

/**
 * The request's header list as Deno holds it (name and value pairs, as received), or undefined
 * when this Deno keeps none where it is looked for. Deno does not expose the list: its `Request`
 * keeps an inner request under a symbol described `request`, whose `headerList` (a getter for a
 * served request, an array for a constructed one) is an array of `[name, value]` pairs. The key is
 * found once; every list is checked for its shape before use (tests/http/surface_test.ts proves
 * this Deno's lists are used).
 */
export function rawHeaderList(req: Request): ReadonlyArray<readonly [string, string]> | undefined {
  if (innerKey === undefined) {
    innerKey = Object.getOwnPropertySymbols(req).find((s) => s.description === "request") ?? null;
  }
  if (innerKey === null) return undefined;
  const inner = (req as unknown as Record<symbol, { headerList?: unknown } | undefined>)[innerKey];
  let list: unknown;
  try {
    list = inner?.headerList;
  } catch {
    return undefined; // a served request's list is read from the connection: gone once answered
  }
  if (!Array.isArray(list)) return undefined;
  const first = list[0];
  if (first !== undefined && !(Array.isArray(first) && typeof first[0] === "string")) {
    return undefined;
  }
  return list as ReadonlyArray<readonly [string, string]>;
}

function finish(res: Response): Response {
  res.headers.set("x-content-type-options", "nosniff");
  return res;
}
