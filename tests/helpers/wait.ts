/**
 * Waiting for a condition instead of sleeping: `waitFor` polls until the condition holds and fails
 * with a message once its deadline passes. Deadlines are generous (a loaded 2-core machine); a
 * test that waits for the right thing never needs a tight one.
 */

/** Options of {@link waitFor}. */
export interface WaitOptions {
  /** Deadline, ms (default 15 s). */
  timeout?: number;
  /** Pause between polls, ms (default 20). */
  interval?: number;
  /** What is awaited, for the failure message. */
  what?: string;
}

/**
 * Polls `cond` until it returns a truthy value (returned) or throws past the deadline. A `cond`
 * that throws counts as not yet (its last error is in the failure message).
 */
export async function waitFor<T>(
  cond: () => T | Promise<T>,
  { timeout = 15_000, interval = 20, what = "condition" }: WaitOptions = {},
): Promise<NonNullable<T>> {
  const deadline = performance.now() + timeout;
  let last: unknown = null;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v as NonNullable<T>;
      last = v;
    } catch (e) {
      last = e;
    }
    if (performance.now() > deadline) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${String(last)})`);
    }
    await new Promise((r) => setTimeout(r, interval));
  }
}

/** Whether `p` has settled by now (without waiting for it). */
export async function settled(p: Promise<unknown>): Promise<boolean> {
  const pending = Symbol();
  const v = await Promise.race([p.then(() => 0, () => 0), Promise.resolve(pending)]);
  return v !== pending;
}

/**
 * Whether none of `ps` settles within `ms`: the one bounded wait a test may need, to show that
 * something does NOT happen (a correct server never settles them, so the bound only limits how
 * long a broken one gets to show itself).
 */
export async function staysPending(ps: Promise<unknown>[], ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const window = new Promise<"pending">((r) => (timer = setTimeout(() => r("pending"), ms)));
  const any = Promise.race(ps.map((p) => p.then(() => "settled", () => "settled")));
  const v = await Promise.race([window, any]);
  clearTimeout(timer);
  return v === "pending";
}
