/**
 * The worker side of `http.workers` > 1: answers the supervisor's messages around one serving
 * instance (src/serve.ts). main.ts is the worker module itself (the same file runs in every
 * thread), so `deno compile` and `deno bundle` carry workers without extra entry points.
 *
 * @module
 */
import { type Server, start, type WorkerSide } from "../serve.ts";
import { metricsJSON } from "../metrics.ts";
import { setOnceStore, storeFull } from "../util/once.ts";
import type { PoolStats } from "../db/pool.ts";
import type { FromWorker, ListenFailure, ReportKind, ToWorker } from "./protocol.ts";
import { unpackState } from "./state.ts";
import type { Config } from "../config/load.ts";
import { log } from "../log.ts";

/** The worker's view of its global scope. */
interface Scope {
  postMessage(message: FromWorker): void;
  onmessage: ((e: MessageEvent<ToWorker>) => void) | null;
}

/** Whether this code runs in a worker thread (not the process's main thread). */
export function inWorker(): boolean {
  return typeof (globalThis as Record<string, unknown>).WorkerGlobalScope !== "undefined";
}

/** Runs this thread as a worker: waits for `init`, serves, obeys the supervisor. */
export function runWorker(): void {
  const scope = globalThis as unknown as Scope;
  const post = (m: FromWorker) => scope.postMessage(m);
  let server: Server | null = null;
  let cfg: Config | null = null;
  let seq = 0;
  const waiting = new Map<number, (value: unknown) => void>();
  const ask = <T>(
    m: { t: "collect"; what: ReportKind } | {
      t: "claim";
      ns: string;
      key: string;
      expiresAt: number;
    },
  ): Promise<T> =>
    new Promise((resolve) => {
      const id = ++seq;
      waiting.set(id, resolve as (v: unknown) => void);
      post({ ...m, id });
    });

  const report = async (what: ReportKind): Promise<unknown> =>
    what === "metrics" ? await metricsJSON() : server?.poolStats() ?? null;

  scope.onmessage = async (e) => {
    const m = e.data;
    switch (m.t) {
      case "init": {
        cfg = m.cfg;
        setOnceStore({
          claim: async (ns, key, expiresAt) => {
            const ok = await ask<boolean | null>({ t: "claim", ns, key, expiresAt });
            if (ok === null) throw storeFull();
            return ok;
          },
        });
        const side: WorkerSide = {
          index: m.index,
          count: m.count,
          port: m.port,
          poolSize: m.poolSize,
          secret: m.secret,
          poolStats: async () => sumPools(await ask<unknown[]>({ t: "collect", what: "pool" })),
          metricsText: async () =>
            String((await ask<unknown[]>({ t: "collect", what: "metrics" }))[0]),
        };
        try {
          server = await start(m.cfg, side);
          post({ t: "listening", port: server.port });
        } catch (err) {
          post({ t: "failed", error: failureKind(err), message: (err as Error).message });
        }
        return;
      }
      case "state": {
        if (!server) return;
        const state = unpackState(cfg!, m.state);
        // This instance's own reload hooks (the templates' cache); once-per-process ones (the
        // TypeScript helper file) ran in the supervisor.
        try {
          for (const hook of server.runtime.hooks) await hook(state);
        } catch (e) {
          log.error("reload hook failed in a worker: {error}", { error: (e as Error).message });
        }
        server.runtime.release(state);
        return;
      }
      case "hold":
        await server?.runtime.hold();
        post({ t: "held", id: m.id });
        return;
      case "release":
        server?.runtime.release();
        return;
      case "report":
        post({ t: "reported", id: m.id, value: await report(m.what) });
        return;
      case "collected":
      case "claimed": {
        const resolve = waiting.get(m.id);
        waiting.delete(m.id);
        resolve?.(m.t === "claimed" ? m.ok : m.values);
        return;
      }
      case "shutdown":
        await server?.shutdown();
        post({ t: "stopped" });
        return;
    }
  };
}

/** Pool figures summed over workers. */
export function sumPools(values: unknown[]): PoolStats {
  const sum: PoolStats = { size: 0, in_use: 0, waiting: 0, overdue: 0 };
  for (const v of values as (PoolStats | null)[]) {
    if (!v) continue;
    sum.size += v.size;
    sum.in_use += v.in_use;
    sum.waiting += v.waiting;
    sum.overdue += v.overdue ?? 0;
  }
  return sum;
}

function failureKind(err: unknown): ListenFailure {
  if (err instanceof Deno.errors.AddrInUse) return "AddrInUse";
  if (err instanceof Deno.errors.AddrNotAvailable) return "AddrNotAvailable";
  if (err instanceof Deno.errors.PermissionDenied) return "PermissionDenied";
  return "other";
}
