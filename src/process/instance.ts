/**
 * One serving instance: the HTTP listener, the request pool, sessions, SSO and the live state.
 * A single-worker svc runs one in the main thread and loads its own state; with `http.workers`
 * > 1 each worker runs one (src/process/worker.ts) on a shared port (SO_REUSEPORT), with its
 * slice of the pool, and the supervisor hands it the state (src/process/supervisor.ts).
 *
 * @module
 */
import { type Config, connectionString } from "../config/load.ts";
import { configureLogging, log } from "../observe/log.ts";
import { loadSecret } from "../auth/secret.ts";
import { sessionsOf } from "../auth/session.ts";
import { Database, type PoolStats } from "../db/pool.ts";
import { HealthProbe } from "../db/health.ts";
import { loadUntilReady, Runtime } from "../state/runtime.ts";
import { type Cluster, createApp } from "../http/server.ts";
import { installProcessGuard, uncaughtErrors } from "./uncaught_guard.ts";
import { bindMetricSources } from "../observe/metrics.ts";
import { announce, publicUrl } from "./startup.ts";
import { ignoredEnv, suspiciousEnv } from "../config/env.ts";
import { createSso } from "../sso/endpoints.ts";
import { routeHooks as buildRouteHooks } from "../http/route_hooks.ts";
import { helperPathHook } from "../client/endpoint.ts";
import { serveMetrics } from "../http/metrics_endpoint.ts";
import { ClientWatch } from "../http/disconnect.ts";
import { openReplayStore } from "../sso/store.ts";
import { onceStore, setOnceStore } from "../util/once.ts";
import { openReadTargets } from "../db/replicas.ts";
import { configureReadAhead, readAhead } from "../http/read_ahead.ts";

/** A running server. */
export interface Server {
  cfg: Config;
  port: number;
  runtime: Runtime;
  /** Resolves when the first successful load is done. */
  ready: Promise<void>;
  /** Graceful shutdown: stop accepting, drain, close the pool. */
  shutdown(): Promise<void>;
  /** The request pool's figures (this instance's slice). */
  poolStats(): PoolStats;
}

/** What a worker's instance gets from its supervisor. */
export interface WorkerSide extends Cluster {
  /** 0-based worker number. */
  index: number;
  /** Port to bind with SO_REUSEPORT. */
  port: number;
  /** This worker's share of `pg.pool_size`. */
  poolSize: number;
  /** The session secret the supervisor loaded. */
  secret: Uint8Array;
}

/**
 * Starts svc with a loaded configuration. Without `worker` it loads its state itself (retrying
 * until the database answers); as a worker it waits for the supervisor's state.
 */
export async function start(cfg: Config, worker?: WorkerSide): Promise<Server> {
  configureLogging(cfg.logging, worker ? { worker: worker.index } : undefined);
  installProcessGuard();
  const secret = worker?.secret ??
    await loadSecret({ secret: cfg.jwt.secret, secretsDir: cfg.secrets.dir });
  const sessions = sessionsOf(cfg.jwt, secret);
  configureReadAhead(cfg.http.read_ahead, cfg.http.send_timeout);
  const db = new Database(connectionString(cfg), {
    size: worker?.poolSize ?? cfg.pg.pool_size,
    poolTimeout: cfg.pg.pool_timeout,
    connectTimeout: cfg.pg.connect_timeout,
    statementTimeout: cfg.pg.query.statement_timeout,
    transactionTimeout: cfg.pg.query.transaction_timeout,
    leaseGrace: cfg.pg.lease_grace,
    stallTimeout: cfg.pg.stall_timeout,
    maxLifetime: cfg.pg.max_lifetime,
    maxParams: cfg.pg.query.max_params,
    maxStatementSize: cfg.pg.query.max_statement_size,
    preparedStatements: cfg.pg.prepared_statements,
  });
  const health = new HealthProbe(connectionString(cfg));
  // Read replicas (pg.read_uri): null without them (src/db/replicas.ts).
  const reads = openReadTargets(cfg, db, worker) ?? undefined;
  const runtime = new Runtime(cfg);
  // One process writes the helper file itself; with workers, the supervisor does, once.
  if (!worker && cfg.typescript.helper_path) {
    runtime.hooks.push(helperPathHook(cfg, cfg.typescript.helper_path));
  }
  const routeHooks = buildRouteHooks(cfg, runtime);
  const sso = createSso({ cfg, db, sessions, secret, hooks: routeHooks });
  const clientWatch = new ClientWatch();
  bindMetricSources({
    pool: () => db.stats(),
    readAhead: () => readAhead.used,
    wellknown: () => {
      const wk = runtime.state?.wellknown;
      if (!wk) return null;
      return { active: wk.size, deactivated: wk.warnings.filter((w) => w.name).length };
    },
    tokenCache: () => sessions.cacheStats(),
    uncaught: uncaughtErrors,
  });
  const app = createApp({
    cfg,
    db,
    runtime,
    sessions,
    health,
    sso,
    routeHooks,
    cluster: worker,
    clientWatch,
    reads,
  });
  const server = Deno.serve({
    hostname: cfg.http.host,
    port: worker?.port ?? cfg.http.port,
    reusePort: worker !== undefined,
    onListen: () => {},
  }, app.fetch);
  const port = (server.addr as Deno.NetAddr).port;
  clientWatch.listening(server.addr as Deno.NetAddr);
  if (!worker) {
    log.info("listening on {host}:{port}", { host: cfg.http.host, port });
    announceStart(cfg, port);
  }
  void sso.start();
  // One process: its own replay store (with workers, the supervisor holds it).
  const previousStore = onceStore();
  const replayStore = worker ? null : openReplayStore(cfg);
  if (replayStore) setOnceStore(replayStore);
  const metricsServer = !worker && cfg.http.metrics.port !== undefined
    ? serveMetrics(cfg.http.metrics.host, cfg.http.metrics.port)
    : null;

  let stopping = false;
  const ready = worker
    ? runtime.loaded
    : loadUntilReady(() => runtime.reload("startup"), () => stopping);
  // Every later reload fetches the SSO providers' metadata and keys again, in the background
  // (held requests never wait for an identity provider).
  void ready.then(() => runtime.hooks.push(() => void sso.refresh()));

  const shutdown = async () => {
    if (stopping) return;
    stopping = true;
    if (!worker) log.info("shutting down");
    const drained = server.shutdown();
    await metricsServer?.shutdown();
    await runtime.drain(cfg.reload.drain_timeout);
    clientWatch.close();
    log.debug("shutdown: in-flight requests drained");
    // Requests were cancelled by the drain; never let one that ignores it keep the process up.
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([drained, new Promise((r) => (timer = setTimeout(r, 5000)))]);
    clearTimeout(timer);
    log.debug("shutdown: listener closed");
    sso.stop();
    if (replayStore) {
      setOnceStore(previousStore);
      await replayStore.close();
    }
    await Promise.all([db.close(), health.close(), reads?.close()]);
    log.debug("shutdown: pool closed");
  };
  return { cfg, port, runtime, ready, shutdown, poolStats: () => db.stats() };
}

/**
 * Logs what a person starting svc needs (URL, sample requests, ignored env, playground). An
 * ignored `SVC_` variable that svc does not read on purpose and no container platform set is
 * warned about (a misspelled key: `SVC_PG_URI` for `SVC_PG__URI`), the others logged at debug.
 */
export function announceStart(cfg: Config, port: number): void {
  announce(cfg, port);
  const env = Deno.env.toObject();
  const suspicious = new Map(suspiciousEnv(env).map((s) => [s.name, s]));
  for (const name of ignoredEnv(env)) {
    const s = suspicious.get(name);
    if (s === undefined) {
      log.debug("environment variable {name} is not configuration (no __): ignored", { name });
    } else if (s.suggestion) {
      log.warn(
        "environment variable {name} is not configuration and is ignored: did you mean " +
          "{suggestion} (key {key}, its dots written __)?",
        { ...s },
      );
    } else if (s.key) {
      log.warn(
        "environment variable {name} is not configuration and is ignored: {key} has no " +
          "variable, give the flag {flag} or set it in the config file",
        { ...s, flag: `--${s.key}` },
      );
    } else {
      log.warn(
        "environment variable {name} is not configuration and is ignored (configuration " +
          "variables are SVC_<SECTION>__<KEY>, a key's dots written __)",
        { name },
      );
    }
  }
  if (cfg.http.playground.enable) {
    // One placeholder holding the whole URL: the console format quotes string values.
    log.info("query playground: {url}", {
      url: `${publicUrl(cfg.http.host, port)}/svc/playground`,
    });
  }
}
