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
import { isMultipart } from "./multipart.ts";

/** The middleware for a configuration (register it before every other one). */
export function httpSurface(cfg: Config): MiddlewareHandler {
  const { cors, csp } = cfg.http;
  const bodyTimeoutMs = cfg.http.body_timeout * 1000;
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
    // Multipart bodies are read by decodeMultipart with its own idle timeout (and BYOB buffers).
    if (req.body && bodyTimeoutMs > 0 && !isMultipart(req)) {
      c.req.raw = guardBody(req, bodyTimeoutMs);
    }
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

/** `req` with a body that fails with 408 HTTP_BODY_TIMEOUT when the client stalls `ms`. */
export function guardBody(req: Request, ms: number): Request {
  const src = req.body!.getReader();
  const body = new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      try {
        const r = await Promise.race([
          src.read().catch((e) => {
            // Broken framing or a client gone away: the client's fault, never a 500.
            throw new SvcError("QUERY_INVALID", `request body could not be read: ${e}`);
          }),
          new Promise<never>((_, reject) => {
            timer = setTimeout(
              () => reject(new SvcError("HTTP_BODY_TIMEOUT", `request body stalled for ${ms} ms`)),
              ms,
            );
          }),
        ]);
        if (r.done) ctrl.close();
        else ctrl.enqueue(r.value);
      } catch (e) {
        src.cancel(e).catch(() => {});
        ctrl.error(e);
      } finally {
        clearTimeout(timer);
      }
    },
    cancel(reason) {
      return src.cancel(reason);
    },
  });
  return new Request(req.url, {
    method: req.method,
    headers: req.headers,
    body,
    // Keep the client's signal: a client that goes away still cancels its statement.
    signal: req.signal,
    duplex: "half",
  } as RequestInit);
}
