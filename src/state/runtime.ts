/**
 * The live state (schema model, well-known queries) and its reload (docs/operations.md "Reload"): hold new
 * requests → drain in-flight ones (then cancel them) → run `reload.cmd` → re-introspect and
 * reload well-known queries → swap atomically → release. A failed reload keeps the old state.
 */
import type { Config } from "../config/load.ts";
import { connectionString } from "../config/load.ts";
import { exposeSchemas } from "../db/exposed.ts";
import { Blacklist } from "../db/blacklist.ts";
import { introspect } from "../db/introspect.ts";
import type { Schema } from "../db/schema.ts";
import { loadWellKnown, type Registry } from "../wellknown/registry.ts";
import { log } from "../observe/log.ts";
import { declareRoutes, type RouteTable } from "./route_table.ts";
import { metrics } from "../observe/metrics.ts";
import type { Cancelable, CancelHooks } from "../auth/roles.ts";
import { templateWarnings } from "./template_files.ts";
import { oneAtATime } from "../util/rerun.ts";

/** Everything a request reads, swapped as one value. */
export interface AppState {
  schema: Schema;
  wellknown: Registry;
  /** Whether `pg.query.anonymous_role` exists (else anonymous access is disabled). */
  anonymousExists: boolean;
  /** Declared routes and middleware, rebuilt with the schema. */
  routes: RouteTable;
  loadedAt: Date;
}

/**
 * Why a reload runs: the first load, SIGUSR1, or a notification on `pg.notify_channel`
 * (src/db/listen.ts). Metrics and `SVC_RELOAD_REASON` of `reload.cmd` carry it.
 */
export type ReloadReason = "startup" | "signal" | "notify";

/** Hooks run during a reload after the new state is built (e.g. writing database.ts). */
export type ReloadHook = (state: AppState) => Promise<void> | void;

/**
 * A request in flight (one object per request: its abort controller and its exit, linked into its
 * runtime's list: no hashing per request). A drain past its timeout aborts it; the request may
 * abort it too (its client went away).
 */
export class InFlight extends AbortController implements CancelHooks {
  /** Neighbours in the runtime's list (null: first, last, or left). */
  prev: InFlight | null = null;
  next: InFlight | null = null;
  #list: InFlightList | null;
  /** What to cancel when aborted: one hook, or several (a request's concurrent leases). */
  #hooked: Cancelable | Cancelable[] | null = null;

  /** An entry appended to `list`. */
  constructor(list: InFlightList) {
    super();
    this.#list = list;
    list.add(this);
  }

  /** Aborts the signal, then cancels what is hooked. */
  override abort(reason?: unknown): void {
    super.abort(reason);
    const h = this.#hooked;
    this.#hooked = null;
    if (h === null) return;
    if (Array.isArray(h)) { for (const c of h) c.cancel(); }
    else h.cancel();
  }

  /** Calls `c.cancel()` when aborted (at once when it was). */
  hook(c: Cancelable): void {
    if (this.signal.aborted) return c.cancel();
    const h = this.#hooked;
    if (h === null) this.#hooked = c;
    else if (Array.isArray(h)) h.push(c);
    else this.#hooked = [h, c];
  }

  /** Withdraws a hook. */
  unhook(c: Cancelable): void {
    const h = this.#hooked;
    if (h === c) this.#hooked = null;
    else if (Array.isArray(h)) {
      const i = h.indexOf(c);
      if (i >= 0) h.splice(i, 1);
    }
  }

  /** Leaves (the request's statements are done; a streamed answer may still be sent). */
  leave(): void {
    const list = this.#list;
    if (list === null) return;
    this.#list = null;
    list.remove(this);
  }
}

/** The requests in flight, as a list (O(1) entry and exit). */
class InFlightList {
  head: InFlight | null = null;
  size = 0;

  constructor(readonly onEmpty: () => void) {}

  add(e: InFlight): void {
    e.next = this.head;
    if (this.head) this.head.prev = e;
    this.head = e;
    this.size++;
  }

  remove(e: InFlight): void {
    if (e.prev) e.prev.next = e.next;
    else this.head = e.next;
    if (e.next) e.next.prev = e.prev;
    e.prev = e.next = null;
    if (--this.size === 0) this.onEmpty();
  }

  /** The entries (a copy: aborting one may make it leave). */
  all(): InFlight[] {
    const out: InFlight[] = [];
    for (let e = this.head; e; e = e.next) out.push(e);
    return out;
  }
}

/** Holds the state, counts in-flight requests and performs reloads. */
export class Runtime {
  state: AppState | null = null;
  readonly #inflight = new InFlightList(() => this.#idle?.());
  #held = 0;
  #hold: Promise<void> | null = null;
  #release: (() => void) | null = null;
  #idle: (() => void) | null = null;
  hooks: ReloadHook[] = [];
  #markLoaded!: () => void;
  /** Resolves when a state is first in place. */
  readonly loaded: Promise<void> = new Promise((r) => (this.#markLoaded = r));

  /** Creates the runtime for a configuration. */
  constructor(readonly cfg: Config) {}

  /**
   * Enters a request: waits while a reload holds requests (a promise then; otherwise the entry at
   * once, no promise). Returns its abort controller and exit.
   */
  enter(): InFlight | Promise<InFlight> {
    if (this.#hold) return this.#enterHeld();
    return new InFlight(this.#inflight);
  }

  async #enterHeld(): Promise<InFlight> {
    this.#held++;
    try {
      while (this.#hold) await this.#hold;
    } finally {
      this.#held--;
    }
    return new InFlight(this.#inflight);
  }

  /** Number of requests in flight. */
  get inflight(): number {
    return this.#inflight.size;
  }

  /** Number of requests held by a reload (waiting to enter). */
  get held(): number {
    return this.#held;
  }

  /** Waits up to `seconds` for in-flight requests, then aborts the rest. */
  async drain(seconds: number): Promise<void> {
    if (this.#inflight.size === 0) return;
    const idle = new Promise<void>((r) => (this.#idle = r));
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((
      r,
    ) => (timer = setTimeout(() => r("timeout"), seconds * 1000)));
    const outcome = await Promise.race([idle, timeout]);
    clearTimeout(timer);
    this.#idle = null;
    if (outcome === "timeout") {
      log.warn("drain timeout: cancelling {count} in-flight request(s)", {
        count: this.#inflight.size,
      });
      for (const ac of this.#inflight.all()) ac.abort(new Error("cancelled by reload"));
    }
  }

  /**
   * Reloads (or loads, at startup); returns success. One reload at a time: a call while one runs
   * gets the next one, which starts after it (calls made meanwhile share it), so a change notified
   * during a reload that may already have read the catalog is never missed.
   */
  reload(reason: ReloadReason): Promise<boolean> {
    return this.#reload(reason);
  }

  readonly #reload = oneAtATime((reason: ReloadReason) => this.#doReload(reason));

  /**
   * Holds new requests and drains in-flight ones (cancelling them after `reload.drain_timeout`).
   * Returns once no request is in flight; {@link release} lets held requests go on. With several
   * workers the supervisor holds every worker this way before it runs `reload.cmd` once.
   */
  async hold(): Promise<void> {
    if (!this.#hold) this.#hold = new Promise((r) => (this.#release = r));
    await this.drain(this.cfg.reload.drain_timeout);
  }

  /** Ends a {@link hold}, swapping in `state` first when given. */
  release(state?: AppState): void {
    if (state) {
      this.state = state;
      this.#markLoaded();
    }
    this.#hold = null;
    this.#release?.();
    this.#release = null;
  }

  async #doReload(reason: ReloadReason): Promise<boolean> {
    const t0 = performance.now();
    let next: AppState | undefined;
    try {
      await this.hold();
      next = await reloadState(this.cfg, reason, this.hooks);
      recordReload(reason, next, t0);
      return true;
    } catch (e) {
      recordReloadFailure(reason, e, t0, this.state !== null);
      return false;
    } finally {
      this.release(next);
    }
  }
}

/**
 * The startup load: `reload("startup")` until it succeeds, backing off from 250 ms to 5 s between
 * tries, or until `stopping()` (shutdown began first).
 */
export async function loadUntilReady(
  reload: () => Promise<boolean>,
  stopping: () => boolean,
): Promise<void> {
  let delay = 250;
  while (!stopping()) {
    if (await reload()) return;
    log.warn("database not ready; retrying in {ms} ms", { ms: delay });
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 5000);
  }
}

/** Runs `reload.cmd` (when set), builds a fresh state and runs the reload hooks on it. */
export async function reloadState(
  cfg: Config,
  reason: ReloadReason,
  hooks: ReloadHook[],
): Promise<AppState> {
  if (cfg.reload.cmd) await runReloadCmd(cfg.reload.cmd, reason, cfg.reload.timeout);
  const state = await buildState(cfg);
  const powers = state.schema.currentUserPowers ?? [];
  if (reason === "startup" && !cfg.dev && powers.length > 0) {
    log.warn(
      "svc connects as {user}, which has {powers}: a session whose role svc cannot switch to " +
        "is refused, but the connection itself is not bounded by grants or row-level security; " +
        "connect as a NOINHERIT role without them (docs/security.md)",
      { user: state.schema.currentUser, powers: powers.join(" and ") },
    );
  }
  for (const hook of hooks) await hook(state);
  return state;
}

/** Counts and logs a successful reload that started at `t0` (performance.now()). */
export function recordReload(reason: string, state: AppState, t0: number): void {
  metrics.reloads.inc({ reason, outcome: "ok" });
  metrics.reloadDuration.observe((performance.now() - t0) / 1000);
  log.info(
    "{reason} reload done in {ms} ms: {relations} relations, {wellknown} well-known queries",
    {
      reason,
      ms: Math.round(performance.now() - t0),
      relations: state.schema.relations.size,
      wellknown: state.wellknown.list().length,
      introspection_ms: Math.round(state.schema.durationMs),
    },
  );
}

/**
 * Counts and logs a failed reload: the previous state is kept, or, with none yet (`loaded`
 * false: the first load), requests answer 503 PG_UNAVAILABLE while it is retried.
 */
export function recordReloadFailure(
  reason: string,
  e: unknown,
  t0: number,
  loaded = true,
): void {
  metrics.reloads.inc({ reason, outcome: "failed" });
  metrics.reloadDuration.observe((performance.now() - t0) / 1000);
  const error = (e as Error).message;
  if (loaded) {
    log.error("{reason} reload failed, keeping the previous state: {error}", { reason, error });
  } else {
    log.error(
      "{reason} load failed (requests answer 503 until it succeeds; is pg.uri, or pg.host and " +
        "the other pg.* keys, your database?): {error}",
      { reason, error },
    );
  }
}

/** Builds a fresh state: introspection, then well-known queries compiled against it. */
export async function buildState(cfg: Config): Promise<AppState> {
  const blacklist = new Blacklist(cfg.blacklist);
  for (const message of blacklist.warnings) log.warn("{message}", { message });
  // pg.schemas: only the exposed schemas stay in the model (src/db/exposed.ts).
  const schema = exposeSchemas(await introspect(connectionString(cfg), blacklist), cfg.pg.schemas);
  const wellknown = await loadWellKnown(schema, cfg.pg.query.wellknown_path, {
    maxDepth: cfg.pg.query.max_depth,
  });
  for (const w of wellknown.warnings) {
    log.warn("well-known queries: {message} ({files})", {
      name: w.name ?? "(file)",
      message: w.message,
      files: w.files.join(", "),
    });
  }
  const anonymousExists = schema.roles.has(cfg.pg.query.anonymous_role);
  if (!anonymousExists) {
    log.warn("anonymous role {role} does not exist: anonymous access is disabled", {
      role: cfg.pg.query.anonymous_role,
    });
  }
  const routes = declareRoutes(schema, cfg.route, cfg.pg.query.anonymous_role);
  for (const w of routes.warnings) log.warn("routes: {message}", { message: w });
  const active = [...routes.routes, ...routes.middleware];
  for (const w of await templateWarnings(cfg.http.templates.path, active)) {
    log.warn("templates: {message}", { message: w });
  }
  return { schema, wellknown, anonymousExists, routes, loadedAt: new Date() };
}

/** Runs `reload.cmd` with `sh -c` under a timeout; throws on failure or timeout. */
export async function runReloadCmd(
  cmd: string,
  reason: string,
  timeoutSeconds: number,
): Promise<void> {
  const child = new Deno.Command("sh", {
    args: ["-c", cmd],
    env: { SVC_RELOAD_REASON: reason },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"timeout">((
    r,
  ) => (timer = setTimeout(() => r("timeout"), timeoutSeconds * 1000)));
  const result = await Promise.race([child.output(), timeout]);
  clearTimeout(timer);
  if (result === "timeout") {
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
    await child.status;
    throw new Error(`reload.cmd timed out after ${timeoutSeconds} s`);
  }
  if (!result.success) {
    const err = new TextDecoder().decode(result.stderr).trim();
    throw new Error(`reload.cmd exited with ${result.code}${err ? `: ${err}` : ""}`);
  }
}
