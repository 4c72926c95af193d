/**
 * One run at a time, none missed: the reload's discipline (src/state/runtime.ts,
 * src/process/supervisor.ts). A reload reads the catalog at one moment; a change notified while it
 * runs may come after that moment, so joining the running reload could miss it.
 *
 * @module
 */

/**
 * Wraps `task` so that at most one run is in progress: a call while none runs starts one; a call
 * while one runs gets the one run that starts after it (with that first caller's argument), shared
 * by every call made until it starts. Each call's promise settles with a run that began after the
 * call.
 */
export function oneAtATime<A, T>(task: (arg: A) => Promise<T>): (arg: A) => Promise<T> {
  let running: Promise<T> | null = null;
  let next: Promise<T> | null = null;
  const start = (arg: A): Promise<T> => {
    const p: Promise<T> = task(arg).finally(() => {
      if (running === p) running = null;
    });
    running = p;
    return p;
  };
  return (arg) => {
    if (next) return next;
    if (!running) return start(arg);
    const after = running.then(() => {}, () => {});
    next = after.then(() => {
      next = null;
      return start(arg);
    });
    return next;
  };
}
