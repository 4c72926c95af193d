/**
 * A template response: a fresh CSP nonce, the template rendered with it at `it.nonce`, and the
 * `Content-Security-Policy` header carrying the same nonce (a route's `resp.csp` replaces the
 * configured policy; the nonce is still added).
 */
import { cspFor, newNonce } from "./csp.ts";
import type { Templates } from "./templates.ts";

/** Options of one rendered response. */
export interface RenderOptions {
  status?: number;
  headers?: HeadersInit;
  /** `resp.csp`: replaces the configured policy for this response. */
  csp?: string | null;
}

/** Renders `name` with `content` into an HTML response (errors: see Templates.render). */
export async function renderPage(
  templates: Templates,
  cspConfig: Record<string, string | undefined>,
  name: string,
  content: unknown,
  opts: RenderOptions = {},
): Promise<Response> {
  const nonce = newNonce();
  const html = await templates.render(name, content, nonce);
  const headers = new Headers(opts.headers);
  if (!headers.has("content-type")) headers.set("content-type", "text/html; charset=utf-8");
  headers.set("content-security-policy", cspFor(cspConfig, nonce, opts.csp));
  return new Response(html, { status: opts.status ?? 200, headers });
}
