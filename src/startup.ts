/**
 * What svc tells a person starting it: the URL to open and, in dev mode, a first request to try.
 */
import type { Config } from "./config/load.ts";
import { loadConfig } from "./config/load.ts";
import { log } from "./log.ts";

/** The URL clients use for a listen address (wildcards become localhost). */
export function publicUrl(host: string, port: number): string {
  const h = host === "0.0.0.0" || host === "::" || host === "" ? "localhost" : host;
  return `http://${h.includes(":") ? `[${h}]` : h}:${port}`;
}

/** Logs the URL to open (and a sample curl in dev mode). */
export function announce(cfg: Config, port: number): void {
  const url = publicUrl(cfg.http.host, port);
  log.info("svc is serving {url}", { url: `${url}/svc` });
  if (cfg.dev) {
    log.info("try: {curl}", { curl: `curl -s '${url}/svc/database.json'` });
    log.info("try: {curl}", { curl: `curl -s '${url}/svc?relation=artist&limit=3'` });
  }
}

/** The anonymous role of the configuration on the command line (for --print-setup-sql). */
export function setupAnonymousRole(): string {
  try {
    const args = Deno.args.filter((a) => a !== "--print-setup-sql");
    return loadConfig({ args }).pg.query.anonymous_role;
  } catch {
    return "~anonymous";
  }
}

/** `sso.store` of the configuration on the command line (for --print-setup-sql). */
export function setupStore(): string | undefined {
  try {
    const args = Deno.args.filter((a) => a !== "--print-setup-sql");
    return loadConfig({ args }).sso.store;
  } catch {
    return undefined;
  }
}
