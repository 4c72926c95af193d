/**
 * Process-level guard: an error thrown where nothing can catch it (a library's timer or
 * `setImmediate` callback, a promise nobody awaits) is logged loudly and counted, and the process
 * keeps serving instead of exiting. The defect behind it is still a bug to fix where it lives;
 * this only keeps one bad callback from taking every other request down with it.
 */
import { log } from "../observe/log.ts";

let uncaught = 0;
let installed = false;

/** How many uncaught errors and unhandled rejections the guard has absorbed. */
export function uncaughtErrors(): number {
  return uncaught;
}

/** Installs the guard (once per process). */
export function installProcessGuard(): void {
  if (installed) return;
  installed = true;
  globalThis.addEventListener("error", (e: ErrorEvent) => {
    uncaught++;
    e.preventDefault();
    const err = e.error as Error | undefined;
    log.error("uncaught error (process kept alive; please report): {error}", {
      error: err?.stack ?? e.message,
      uncaught_total: uncaught,
    });
  });
  globalThis.addEventListener("unhandledrejection", (e: PromiseRejectionEvent) => {
    uncaught++;
    e.preventDefault();
    const err = e.reason as Error | undefined;
    log.error("unhandled promise rejection (process kept alive; please report): {error}", {
      error: err?.stack ?? String(e.reason),
      uncaught_total: uncaught,
    });
  });
}
