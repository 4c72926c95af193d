/**
 * The HTTP-surface middleware that wraps every request: header-size limit (431), CORS preflight
 * and CORS headers (not under `/auth/`), an idle timeout on the request body (408), and on the
 * way out `X-Content-Type-Options: nosniff` on every response plus a nonce-carrying CSP on HTML
 * responses that do not set their own.
 */
import type { MiddlewareHandler } from "hono";
import type { Config } from "../config/load.ts";
import { SvcError } from "../errors.ts";
import { applyCors, corsApplies, isPreflight, preflight } from "./cors.ts";
import { cspFor, isHtml, newNonce } from "./csp.ts";
import { errorResponse } from "./errors.ts";

/** The middleware for a configuration (register it before every other one). */
export function httpSurface(cfg: Config): MiddlewareHandler {
  const { cors, csp } = cfg.http;
  return async (c, next) => {
    const req = c.req.raw;
    let size = 0;
    for (const [k, v] of req.headers) size += k.length + v.length + 4;
    if (size > cfg.http.max_header_size) {
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
    const withCors = corsApplies(c.req.path);
    if (withCors && isPreflight(req)) return finish(preflight(cors, req));
    // The body's idle timeout (408) is applied where bodies are read (readBodyBytes, and
    // decodeMultipart with its own), not by wrapping every request's stream here: measured,
    // the wrapper cost a quarter of a primary-key read's throughput.
    await next();
    let res = c.res;
    try {
      decorate(res.headers);
    } catch {
      // Immutable headers (a fetched response): copy it.
      res = new Response(res.body, res);
      decorate(res.headers);
      c.res = undefined;
      c.res = res;
    }
    function decorate(h: Headers) {
      if (withCors) applyCors(cors, req.headers.get("origin"), h);
      h.set("x-content-type-options", "nosniff");
      if (isHtml(h.get("content-type")) && !h.has("content-security-policy")) {
        h.set("content-security-policy", cspFor(csp, newNonce()));
      }
    }
  };
}

function finish(res: Response): Response {
  res.headers.set("x-content-type-options", "nosniff");
  return res;
}
