/**
 * svc entry point: load configuration, start serving, load the schema (retrying until the
 * database answers), reload on SIGUSR1 and on `NOTIFY svc, 'reload'`, shut down gracefully on
 * SIGTERM/SIGINT.
 *
 * With `http.workers` > 1 this thread supervises (src/process/supervisor.ts) and the same module
 * runs in every worker thread (src/process/worker.ts), so a compiled binary carries its workers.
 */
import {
  type Config,
  ConfigError,
  connectionString,
  loadConfigAsync,
  workerCount,
} from "./src/config/load.ts";
import { SecretError } from "./src/auth/secret.ts";
import { runAction } from "./src/process/cli.ts";
import { setupRoles, setupStore } from "./src/process/startup.ts";
import { start } from "./src/process/instance.ts";
import { supervise } from "./src/process/supervisor.ts";
import { inWorker, runWorker } from "./src/process/worker.ts";
import { log } from "./src/observe/log.ts";
import { holdSignalInspectorPort, reusePortAllowed } from "./src/process/inspector_guard.ts";
import { listenForReload } from "./src/db/listen.ts";
import { tuneMalloc } from "./src/process/malloc.ts";
import type { ReloadReason } from "./src/state/runtime.ts";

export { type Server, start } from "./src/process/instance.ts";

/** What main needs of a running svc (one process or a supervisor of workers). */
interface Running {
  reload(reason: ReloadReason): Promise<boolean>;
  shutdown(): Promise<void>;
}

async function launch(cfg: Config): Promise<Running> {
  const workers = workerCount(cfg);
  if (cfg.http.workers !== undefined && workers < cfg.http.workers) {
    console.error(
      `svc: http.workers=${cfg.http.workers} exceeds pg.pool_size=${cfg.pg.pool_size}: ` +
        `running ${workers} workers`,
    );
  }
  // SO_REUSEPORT needs --unstable-net (set in deno.json and the compiled binary; a bundle run by
  // hand may lack it): then serve with one worker rather than not at all.
  if (workers > 1 && !reusePortAllowed()) {
    console.error(`svc: ${workers} workers need --unstable-net (SO_REUSEPORT); running 1 worker`);
  }
  if (workers === 1 || !reusePortAllowed()) {
    const server = await start(cfg);
    return { reload: (r) => server.runtime.reload(r), shutdown: () => server.shutdown() };
  }
  const sup = await supervise(cfg, workers, import.meta.url);
  return { reload: (r) => sup.reload(r), shutdown: () => sup.shutdown() };
}

async function main(): Promise<void> {
  let cfg: Config;
  try {
    // --help, --version, --print-setup-sql (whose configuration is checked as a start's is).
    if (runAction(Deno.args, setupRoles, setupStore)) Deno.exit(0);
    cfg = await loadConfigAsync();
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(`svc: configuration error: ${e.message}`);
      Deno.exit(2);
    }
    throw e;
  }
  // glibc's thresholds, process-wide, before the first large answer (src/process/malloc.ts).
  tuneMalloc();
  let running: Running;
  try {
    running = await launch(cfg);
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
  if (!cfg.jwt.secure) {
    log.warn(
      "jwt.secure is false: the session cookie is sent without Secure, also over plain http " +
        "(only for a staging host without TLS)",
    );
  }
  // SIGUSR1 reloads; it must not also open Deno's inspector (src/process/inspector_guard.ts).
  holdSignalInspectorPort();
  Deno.addSignalListener("SIGUSR1", () => void running.reload("signal"));
  // `NOTIFY <pg.notify_channel>, 'reload'` reloads the same way, once per process (src/db/listen.ts).
  const listening = listenForReload(
    { channel: cfg.pg.notify_channel, uri: cfg.pg.listen_uri ?? connectionString(cfg) },
    () => running.reload("notify"),
  );
  // One shutdown, whatever number of signals asks for it: a terminal's Ctrl-C reaches svc under a
  // wrapper twice (SIGINT from the terminal, SIGTERM from the wrapper passing it on).
  let stopping = false;
  for (const sig of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(sig, async () => {
      if (stopping) return;
      stopping = true;
      await listening?.close();
      await running.shutdown();
      log.debug("exiting");
      Deno.exit(0);
    });
  }
}

if (import.meta.main) {
  if (inWorker()) runWorker();
  else await main();
}
