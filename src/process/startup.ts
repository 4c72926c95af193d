/**
 * What svc tells a person starting it: the URL to open and, in dev mode, a first request to try.
 */
import type { Config } from "../config/load.ts";
import { loadConfig } from "../config/load.ts";
import { log } from "../observe/log.ts";
import type { SetupRoles } from "./cli.ts";

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

/**
 * The roles of the configuration on the command line and in the environment, for
 * --print-setup-sql: the anonymous role and the authenticator, which is `pg.user` or the user
 * named in `pg.uri` (else `svc_authenticator`), and the exposed schemas (`pg.schemas`). A configuration svc would refuse to start with
 * (an unknown or misspelled key, a bad value) throws its ConfigError: printing the roles of a
 * configuration read wrong would name the wrong ones.
 */
export function setupRoles(args: string[] = Deno.args): SetupRoles {
  const cfg = setupConfig(args);
  let user = cfg.pg.user;
  if (!user && cfg.pg.uri) {
    try {
      user = decodeURIComponent(new URL(cfg.pg.uri).username) || undefined;
    } catch { /* not a URL: keep the default */ }
  }
  return {
    anonymousRole: cfg.pg.query.anonymous_role,
    authenticator: user,
    schemas: cfg.pg.schemas,
  };
}

/** `sso.store` of the configuration on the command line (for --print-setup-sql). */
export function setupStore(args: string[] = Deno.args): string | undefined {
  return setupConfig(args).sso.store;
}

function setupConfig(args: string[]): Config {
  return loadConfig({ args: args.filter((a) => a !== "--print-setup-sql") });
}
