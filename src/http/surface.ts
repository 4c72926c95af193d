/**
 * The HTTP-surface middleware that wraps every request: header-size limit (431), CORS preflight
 * and CORS headers (not under `/auth/`), an idle timeout on the request body (408), and on the
 * way out `X-Content-Type-Options: nosniff` on every response plus a nonce-carrying CSP on HTML
 * responses that do not set their own.
 */
import type { MiddlewareHandler } from "hono";
import type { Config } from "../config/load.ts";
import { SvcError } from "../svc_error.ts";
import { applyCors, corsApplies, isPreflight, preflight } from "./cors.ts";
import { cspFor, isHtml, newNonce } from "./csp.ts";
import { errorResponse } from "./error_response.ts";

/**
 * The surface's answer before the request proper: 431 for oversized headers, or the answer to a
 * CORS preflight; null to proceed.
 */
export function surfaceAnswer(cfg: Config, req: Request, path: string): Response | null {
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
  if (corsApplies(path) && isPreflight(req)) return finish(preflight(cfg.http.cors, req));
  return null;
}

/**
 * The surface's headers on a response (CORS, nosniff, CSP on HTML); a response whose headers
 * are immutable (a fetched one) is copied first. Returns the response to send.
 */
export function surfaceDecorate(cfg: Config, req: Request, path: string, res: Response): Response {
  const { cors, csp } = cfg.http;
  const withCors = corsApplies(path);
  const decorate = (h: Headers) => {
    if (withCors) applyCors(cors, req.headers.get("origin"), h);
    h.set("x-content-type-options", "nosniff");
    if (isHtml(h.get("content-type")) && !h.has("content-security-policy")) {
      h.set("content-security-policy", cspFor(csp, newNonce()));
    }
  };
  try {
    decorate(res.headers);
  } catch {
    // Immutable headers (a fetched response): copy it.
    res = new Response(res.body, res);
    decorate(res.headers);
  }
  return res;
}

/** The middleware for a configuration (register it before every other one). */
export function httpSurface(cfg: Config): MiddlewareHandler {
  return async (c, next) => {
    const req = c.req.raw;
    const early = surfaceAnswer(cfg, req, c.req.path);
    if (early) return early;
    // The body's idle timeout (408) is applied where bodies are read (readBodyBytes, and
    // decodeMultipart with its own), not by wrapping every request's stream here: measured,
    // the wrapper cost a quarter of a primary-key read's throughput.
    await next();
    const res = c.res;
    const out = surfaceDecorate(cfg, req, c.req.path, res);
    if (out !== res) {
      c.res = undefined;
      c.res = out;
    }
  };
}

function finish(res: Response): Response {
  res.headers.set("x-content-type-options", "nosniff");
  return res;
}
