/**
 * svc entry point: load configuration, start serving, load the schema (retrying until the
 * database answers), reload on SIGUSR1, shut down gracefully on SIGTERM/SIGINT.
 */
import { type Config, ConfigError, connectionString, loadConfigAsync } from "./src/config/load.ts";
import { configureLogging, log } from "./src/log.ts";
import { loadSecret, SecretError } from "./src/auth/secret.ts";
import { Sessions } from "./src/auth/session.ts";
import { Database } from "./src/db/pool.ts";
import { HealthProbe } from "./src/db/health.ts";
import { Runtime } from "./src/runtime.ts";
import { createApp } from "./src/http/server.ts";
import { installProcessGuard } from "./src/guard.ts";
import { runAction } from "./src/cli.ts";
import { announce, setupAnonymousRole } from "./src/startup.ts";
import { ignoredEnv } from "./src/config/env.ts";
import { createSso } from "./src/sso/mod.ts";
import { surfaceHooks } from "./src/http/hooks.ts";
import { serveMetrics } from "./src/http/metrics.ts";

/** A running server. */
export interface Server {
  cfg: Config;
  port: number;
  runtime: Runtime;
  /** Resolves when the first successful load is done. */
  ready: Promise<void>;
  /** Graceful shutdown: stop accepting, drain, close the pool. */
  shutdown(): Promise<void>;
}

/** Starts svc with a loaded configuration. */
export async function start(cfg: Config): Promise<Server> {
  configureLogging(cfg.logging);
  installProcessGuard();
  const secret = await loadSecret({ secret: cfg.jwt.secret, secretsDir: cfg.secrets.dir });
  const sessions = new Sessions({
    secret,
    algorithm: cfg.jwt.algorithm,
    maxAge: cfg.jwt.max_age,
    renewAfter: cfg.jwt.renew_after,
    maxSessionAge: cfg.jwt.max_session_age,
    cookieName: cfg.jwt.cookie_name,
    sameSite: cfg.jwt.same_site,
  });
  const db = new Database(connectionString(cfg), {
    size: cfg.pg.pool_size,
    poolTimeout: cfg.pg.pool_timeout,
    connectTimeout: cfg.pg.connect_timeout,
    statementTimeout: cfg.pg.query.statement_timeout,
  });
  const health = new HealthProbe(connectionString(cfg));
  const runtime = new Runtime(cfg);
  const routeHooks = surfaceHooks(cfg, runtime);
  const sso = createSso({ cfg, db, sessions, secret, hooks: routeHooks });
  const app = createApp({ cfg, db, runtime, sessions, health, sso, routeHooks });
  const server = Deno.serve({
    hostname: cfg.http.host,
    port: cfg.http.port,
    onListen: () => {},
  }, app.fetch);
  const port = (server.addr as Deno.NetAddr).port;
  log.info("listening on {host}:{port}", { host: cfg.http.host, port });
  announce(cfg, port);
  for (const name of ignoredEnv(Deno.env.toObject())) {
    log.debug("environment variable {name} is not configuration (no __): ignored", { name });
  }
  void sso.start();
  if (cfg.http.playground.enable) {
    log.info("query playground: http://{host}:{port}/svc/playground", {
      host: cfg.http.host === "0.0.0.0" ? "localhost" : cfg.http.host,
      port,
    });
  }
  const metricsServer = cfg.http.metrics.enable && cfg.http.metrics.port !== undefined
    ? serveMetrics(cfg.http.host, cfg.http.metrics.port)
    : null;

  let stopping = false;
  const ready = (async () => {
    let delay = 250;
    while (!stopping) {
      if (await runtime.reload("startup")) return;
      log.warn("database not ready; retrying in {ms} ms", { ms: delay });
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  })();

  const shutdown = async () => {
    if (stopping) return;
    stopping = true;
    log.info("shutting down");
    const drained = server.shutdown();
    await metricsServer?.shutdown();
    await runtime.drain(cfg.reload.drain_timeout);
    log.debug("shutdown: in-flight requests drained");
    // Requests were cancelled by the drain; never let one that ignores it keep the process up.
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([drained, new Promise((r) => (timer = setTimeout(r, 5000)))]);
    clearTimeout(timer);
    log.debug("shutdown: listener closed");
    await Promise.all([db.close(), health.close()]);
    log.debug("shutdown: pool closed");
  };
  return { cfg, port, runtime, ready, shutdown };
}

if (import.meta.main) {
  if (runAction(Deno.args, setupAnonymousRole)) Deno.exit(0);
  let cfg: Config;
  try {
    cfg = await loadConfigAsync();
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(`svc: configuration error: ${e.message}`);
      Deno.exit(2);
    }
    throw e;
  }
  let server: Server;
  try {
    server = await start(cfg);
  } catch (e) {
    if (e instanceof SecretError || e instanceof ConfigError) {
      console.error(`svc: configuration error: ${e.message}`);
      Deno.exit(2);
    }
    if (e instanceof Deno.errors.AddrInUse) {
      console.error(`svc: port ${cfg.http.port} is in use (set --http.port)`);
      Deno.exit(1);
    }
    if (e instanceof Deno.errors.AddrNotAvailable || e instanceof Deno.errors.PermissionDenied) {
      console.error(`svc: cannot listen on ${cfg.http.host}:${cfg.http.port}: ${e.message}`);
      Deno.exit(1);
    }
    throw e;
  }
  Deno.addSignalListener("SIGUSR1", () => void server.runtime.reload("signal"));
  for (const sig of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(sig, async () => {
      await server.shutdown();
      Deno.exit(0);
    });
  }
}
