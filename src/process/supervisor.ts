/**
 * The main thread of a multi-worker svc (`http.workers` > 1). It serves no request itself: it
 * loads the secret and the state once, starts the workers (each a Deno worker running main.ts
 * with its own `Deno.serve({reusePort})` and its slice of `pg.pool_size`), hands every worker
 * each new state, and coordinates what must happen once per process:
 *
 * - reload (SIGUSR1): hold and drain every worker, run `reload.cmd` once, introspect once, swap
 *   everywhere, release (a failed reload releases with the old state);
 * - shutdown (SIGTERM/SIGINT): every worker stops accepting, drains and closes its pool;
 * - `/svc/metrics` and `/svc/health` figures summed over workers; "used once" SSO keys (the
 *   in-memory store, or the `sso.store` table on one connection); the SAML SP key pair created
 *   before any worker starts;
 * - a worker that dies is replaced and given the current state.
 *
 * @module
 */
import { type Config, samlEntries } from "../config/load.ts";
import { configureLogging, log } from "../observe/log.ts";
import { loadSecret } from "../auth/secret.ts";
import {
  type AppState,
  loadUntilReady,
  recordReload,
  recordReloadFailure,
  type ReloadHook,
  type ReloadReason,
  reloadState,
} from "../state/runtime.ts";
import { installProcessGuard } from "./uncaught_guard.ts";
import { promRegistry } from "../observe/exposition.ts";
import { serveMetrics } from "../http/metrics_endpoint.ts";
import { helperPathHook } from "../client/endpoint.ts";
import { LocalOnce, type OnceStore } from "../util/once.ts";
import { openReplayStore } from "../sso/store.ts";
import { announceStart } from "./instance.ts";
import type { FromWorker, ReportKind, SharedState, ToWorker } from "./worker_protocol.ts";
import { packState } from "./worker_state.ts";
import { oneAtATime } from "../util/rerun.ts";

/** A running multi-worker svc. */
export interface Supervisor {
  port: number;
  workers: number;
  /** Resolves when the first load is done (or shutdown began). */
  ready: Promise<void>;
  /** Coordinated reload, one at a time (a call during one gets the next). Resolves with success. */
  reload(reason: ReloadReason): Promise<boolean>;
  /** Drains and stops every worker. */
  shutdown(): Promise<void>;
}

/** Thrown when the first worker cannot listen (same error class as Deno.serve's). */
function listenError(kind: string, message: string): Error {
  const E = (Deno.errors as unknown as Record<string, ErrorConstructor>)[kind];
  return E ? new E(message) : new Error(message);
}

/** How long the supervisor waits for a worker's figures (health, metrics). */
export const REPORT_TIMEOUT_MS = 500;

/** `p`, or null when it takes longer than {@link REPORT_TIMEOUT_MS}. */
function withTimeout<T>(p: Promise<T>): Promise<T | null> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p,
    new Promise<null>((r) => (timer = setTimeout(() => r(null), REPORT_TIMEOUT_MS))),
  ]).finally(() => clearTimeout(timer));
}

/** `pg.pool_size` split over `count` workers (the first ones get the remainder). */
export function poolSlices(total: number, count: number): number[] {
  return Array.from(
    { length: count },
    (_, i) => Math.floor(total / count) + (i < total % count ? 1 : 0),
  );
}

/** One worker thread and its conversation. */
class WorkerHandle {
  readonly worker: Worker;
  #listening: Promise<number>;
  #stopped: Promise<void>;
  #onStopped!: () => void;
  readonly #held = new Map<number, () => void>();
  readonly #reported = new Map<number, (v: unknown) => void>();

  constructor(
    url: string,
    readonly index: number,
    onMessage: (h: WorkerHandle, m: FromWorker) => void,
    onDeath: (h: WorkerHandle, error: string) => void,
  ) {
    this.worker = new Worker(url, { type: "module", name: `svc-worker-${index}` });
    let listening!: (port: number) => void;
    let failed!: (e: Error) => void;
    this.#listening = new Promise((res, rej) => ((listening = res), (failed = rej)));
    this.#stopped = new Promise((r) => (this.#onStopped = r));
    this.worker.onmessage = (e: MessageEvent<FromWorker>) => {
      const m = e.data;
      if (m.t === "listening") listening(m.port);
      else if (m.t === "failed") failed(listenError(m.error, m.message));
      else if (m.t === "held") this.#held.get(m.id)?.();
      else if (m.t === "reported") this.#reported.get(m.id)?.(m.value);
      else if (m.t === "stopped") this.#onStopped();
      else onMessage(this, m);
    };
    this.worker.onerror = (e) => {
      e.preventDefault();
      failed(new Error(e.message));
      onDeath(this, e.message);
    };
  }

  post(m: ToWorker): void {
    this.worker.postMessage(m);
  }

  listening(): Promise<number> {
    return this.#listening;
  }

  hold(id: number): Promise<void> {
    return new Promise((resolve) => {
      this.#held.set(id, () => {
        this.#held.delete(id);
        resolve();
      });
      this.post({ t: "hold", id });
    });
  }

  report(id: number, what: ReportKind): Promise<unknown> {
    return new Promise((resolve) => {
      this.#reported.set(id, (v) => {
        this.#reported.delete(id);
        resolve(v);
      });
      this.post({ t: "report", id, what });
    });
  }

  async stop(timeoutMs: number): Promise<void> {
    this.post({ t: "shutdown" });
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([this.#stopped, new Promise((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
    this.worker.terminate();
  }
}

/**
 * Starts `count` workers running `moduleUrl` (main.ts) and supervises them. Throws the listen
 * error of the first worker (port in use, …) like a single-process start.
 */
export async function supervise(
  cfg: Config,
  count: number,
  moduleUrl: string,
): Promise<Supervisor> {
  configureLogging(cfg.logging);
  installProcessGuard();
  const secret = await loadSecret({ secret: cfg.jwt.secret, secretsDir: cfg.secrets.dir });
  const slices = poolSlices(cfg.pg.pool_size, count);
  const replayStore = openReplayStore(cfg);
  const once: OnceStore = replayStore ?? new LocalOnce();
  if (samlEntries(cfg).length > 0) {
    // Generated here once: workers generating them together would race for the files.
    const { prepareSpKeys } = await import("../sso/certs.ts");
    for (const f of await prepareSpKeys(cfg)) {
      log.error("saml: cannot load or create the SP key pair {pair}: {error}", f);
    }
  }
  const hooks: ReloadHook[] = [];
  if (cfg.typescript.helper_path) hooks.push(helperPathHook(cfg, cfg.typescript.helper_path));
  const handles: WorkerHandle[] = [];
  let shared: SharedState | null = null;
  let port = cfg.http.port;
  let stopping = false;
  let seq = 0;

  const init = (h: WorkerHandle, p: number) =>
    h.post({
      t: "init",
      cfg,
      index: h.index,
      count,
      port: p,
      poolSize: slices[h.index],
      secret,
    });

  const collect = async (what: ReportKind): Promise<unknown[]> => {
    const id = ++seq;
    // A worker that does not answer within REPORT_TIMEOUT_MS is left out (health must answer).
    const values = await Promise.all(handles.map((h) => withTimeout(h.report(id, what))));
    if (what !== "metrics") return values;
    // The supervisor's own figures: reloads (workers count requests, pools, caches).
    const registry = await promRegistry();
    const { AggregatorRegistry } = (await import("prom-client")).default;
    const own = await registry.getMetricsAsJSON();
    values.push(own.filter((m) => m.name.startsWith("svc_reload")));
    const merged = AggregatorRegistry.aggregate(
      values.filter((v) => v !== null) as object[],
    );
    return [await merged.metrics()];
  };

  const onMessage = (h: WorkerHandle, m: FromWorker) => {
    if (m.t === "collect") {
      void collect(m.what).then(
        (values) => h.post({ t: "collected", id: m.id, values }),
        (e) => {
          log.error("collecting {what} from workers failed: {error}", {
            what: m.what,
            error: (e as Error).message,
          });
          h.post({ t: "collected", id: m.id, values: [] });
        },
      );
    } else if (m.t === "claim") {
      once.claim(m.ns, m.key, m.expiresAt).then(
        (ok) => h.post({ t: "claimed", id: m.id, ok }),
        () => h.post({ t: "claimed", id: m.id, ok: null }),
      );
    }
  };

  const onDeath = (dead: WorkerHandle, error: string) => {
    if (stopping) return;
    log.error("worker {index} died ({error}); starting a new one", { index: dead.index, error });
    dead.worker.terminate();
    const h = new WorkerHandle(moduleUrl, dead.index, onMessage, onDeath);
    handles[dead.index] = h;
    init(h, port);
    void h.listening().then(() => shared && h.post({ t: "state", state: shared }), () => {});
  };

  // Workers bind with SO_REUSEPORT, which would let them join another process's listeners on the
  // port (another svc's workers): the port is first bound plainly, which fails when anything
  // listens there, and let go for the workers.
  if (port !== 0) Deno.listen({ hostname: cfg.http.host, port }).close();
  // The first worker binds (port 0 picks one); the others join it on the same port.
  for (let i = 0; i < count; i++) {
    const h = new WorkerHandle(moduleUrl, i, onMessage, onDeath);
    handles.push(h);
    init(h, port);
    try {
      port = await h.listening();
    } catch (e) {
      for (const other of handles) other.worker.terminate();
      throw e;
    }
  }
  log.info("listening on {host}:{port} with {workers} workers", {
    host: cfg.http.host,
    port,
    workers: count,
  });
  announceStart(cfg, port);
  const metricsServer = cfg.http.metrics.port !== undefined
    ? serveMetrics(
      cfg.http.metrics.host,
      cfg.http.metrics.port,
      async () => String((await collect("metrics"))[0]),
    )
    : null;

  const swap = (state: AppState) => {
    shared = packState(state);
    for (const h of handles) h.post({ t: "state", state: shared });
  };

  const doReload = async (reason: ReloadReason): Promise<boolean> => {
    const t0 = performance.now();
    const id = ++seq;
    try {
      // Every worker holds new requests and drains (or cancels) its in-flight ones first.
      await Promise.all(handles.map((h) => h.hold(id)));
      const state = await reloadState(cfg, reason, hooks);
      recordReload(reason, state, t0);
      swap(state);
      return true;
    } catch (e) {
      recordReloadFailure(reason, e, t0, shared !== null);
      for (const h of handles) h.post({ t: "release" });
      return false;
    }
  };
  // One reload at a time; a call during one gets the next (src/util/rerun.ts).
  const reload = oneAtATime(doReload);

  const ready = loadUntilReady(() => reload("startup"), () => stopping);

  const shutdown = async () => {
    if (stopping) return;
    stopping = true;
    log.info("shutting down {workers} workers", { workers: count });
    await metricsServer?.shutdown();
    const budget = (cfg.reload.drain_timeout + 10) * 1000;
    await Promise.all(handles.map((h) => h.stop(budget)));
    await replayStore?.close();
    log.debug("shutdown: every worker stopped");
  };
  return { port, workers: count, ready, reload, shutdown };
}
