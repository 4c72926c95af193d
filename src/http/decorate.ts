/**
 * The last step of every request (src/http/server.ts): CORS headers (not under `/auth/`),
 * `X-Content-Type-Options: nosniff` on every response and a nonce-carrying CSP on HTML responses
 * that do not set their own.
 *
 * @module
 */
import type { Config } from "../config/load.ts";
import { applyCors, corsApplies, corsFields } from "./cors.ts";
import { cspFor, isHtml, newNonce } from "./csp.ts";

/**
 * The surface's headers on a response (CORS, nosniff, CSP on HTML); a response whose headers
 * are immutable (a fetched one) is copied first. Returns the response to send.
 */
export function decorate(cfg: Config, req: Request, path: string, res: Response): Response {
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

/**
 * {@link decorate}'s headers added to the fields of a response not built yet (a
 * src/http/plain_answer.ts answer of `contentType`).
 */
export function decorateFields(
  cfg: Config,
  req: Request,
  path: string,
  contentType: string,
  fields: Record<string, string>,
): void {
  if (corsApplies(path)) corsFields(cfg.http.cors, req.headers.get("origin"), fields);
  fields["x-content-type-options"] = "nosniff";
  if (isHtml(contentType)) fields["content-security-policy"] = cspFor(cfg.http.csp, newNonce());
}
