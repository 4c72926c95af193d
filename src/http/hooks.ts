/**
 * The HTTP surface's services handed to declared routes and SSO callbacks: template rendering
 * (Eta, with the response's nonce), multipart decoding (streamed uploads per route) and the CSP
 * of a rendered page. Built once per process; the templates' cache is reloaded on SIGUSR1.
 */
import type { Config } from "../config/load.ts";
import type { Runtime } from "../state/runtime.ts";
import { cspFor } from "./csp.ts";
import { decodeMultipart, multipartOptions } from "./multipart.ts";
import type { RouteHooks } from "./routes/request.ts";
import { Templates } from "./templates.ts";

/** Builds the hooks (and registers the templates' reload with the runtime). */
export function surfaceHooks(cfg: Config, runtime: Runtime): RouteHooks {
  const templates = new Templates(cfg.http.templates.path, cfg.dev);
  runtime.hooks.push(() => templates.reload());
  return {
    render: (name, it, nonce) => templates.render(name, it, nonce),
    decodeMultipart: (req, route) =>
      decodeMultipart(req, multipartOptions(cfg.http, route.streamUpload)),
    csp: (nonce, override) => cspFor(cfg.http.csp, nonce, override),
  };
}
