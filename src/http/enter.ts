/**
 * The second step of every request (src/http/server.ts): the reload gate. A request waits while a
 * reload holds requests, then counts as in flight until it leaves; aborting its signal (a drain
 * past its timeout, shutdown) cancels it. Health checks are never held by a reload or a drain (an
 * orchestrator must always get its answer).
 *
 * @module
 */
import type { Runtime } from "../state/runtime.ts";
import type { CancelHooks } from "../auth/roles.ts";

/** A request's place among the in-flight ones. */
export interface Gate {
  /** Aborted when the request must stop (drain timeout, shutdown). */
  signal: AbortSignal;
  /** Leaves (the request's statements are done; a streamed answer may still be sent). */
  leave(): void;
  /**
   * Aborts {@link signal} (a gate of the request's own: its client went away), so that the one
   * signal carries every reason to stop. Absent on the shared {@link UNGATED}.
   */
  abort?(reason: unknown): void;
  /** Its cancel hooks (a gate of the request's own), for the request's statements. */
  hook?: CancelHooks["hook"];
  /** Withdraws a hook. */
  unhook?: CancelHooks["unhook"];
}

/** The gate of requests that a reload never holds (health checks). */
export const UNGATED: Gate = { signal: new AbortController().signal, leave: () => {} };

/**
 * Enters a request on `path`: waits while a reload holds requests (not for health checks); the
 * gate at once when none does.
 */
export function enter(runtime: Runtime, path: string): Gate | Promise<Gate> {
  return path.startsWith("/svc/health") ? UNGATED : runtime.enter();
}
