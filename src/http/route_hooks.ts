/**
 * The HTTP surface's services handed to declared routes and SSO callbacks: template rendering
 * (Eta, with the response's nonce), multipart decoding (streamed uploads per route) and the CSP
 * of a rendered page. Built once per process; the templates' cache is reloaded on SIGUSR1. Eta
 * and the multipart parser are imported at their first use: a svc whose routes never render or
 * take a multipart body never loads them.
 */
import type { Config } from "../config/load.ts";
import type { Runtime } from "../state/runtime.ts";
import { cspFor } from "./csp.ts";
import type { RouteHooks } from "./routes/request.ts";
import type { Templates } from "./templates.ts";

/** Builds the hooks (and registers the templates' reload with the runtime). */
export function routeHooks(cfg: Config, runtime: Runtime): RouteHooks {
  let templates: Templates | undefined;
  let loading: Promise<Templates> | undefined;
  const loadTemplates = async (): Promise<Templates> =>
    templates ??
      await (loading ??= import("./templates.ts").then(({ Templates }) =>
        templates = new Templates(cfg.http.templates.path, cfg.dev)
      ));
  runtime.hooks.push(() => templates?.reload());
  let multipart: Promise<typeof import("./multipart.ts")> | undefined;
  return {
    render: async (name, it, nonce) => (await loadTemplates()).render(name, it, nonce),
    decodeMultipart: async (req, route, receiving) => {
      const m = await (multipart ??= import("./multipart.ts"));
      return m.decodeMultipart(req, {
        ...m.multipartOptions(cfg.http, route.streamUpload),
        receiving,
      });
    },
    csp: (nonce, override) => cspFor(cfg.http.csp, nonce, override),
  };
}
