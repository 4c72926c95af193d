/**
 * Readiness probe: asks the database through a connection of its own (never the request pool, so
 * an exhausted pool cannot make an orchestrator kill a healthy process), bounded to 1 s.
 */
import postgres from "postgres";

/** How long a readiness check may take. */
export const READY_TIMEOUT_MS = 1000;

/** A dedicated one-connection client for health checks. */
export class HealthProbe {
  readonly #sql: postgres.Sql;
  #pending: Promise<boolean> | null = null;

  /** Opens (lazily) the probe's own connection. */
  constructor(uri: string) {
    this.#sql = postgres(uri, {
      max: 1,
      onnotice: () => {},
      connection: { application_name: "svc-health" },
      idle_timeout: 30,
      connect_timeout: 1,
      backoff: () => 0.05,
    });
  }

  /** Whether the database answers `select 1` within 1 s; concurrent checks share one query. */
  ready(): Promise<boolean> {
    this.#pending ??= this.#check().finally(() => (this.#pending = null));
    return this.#pending;
  }

  async #check(): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const q = this.#sql`select 1`;
    const timeout = new Promise<false>((
      r,
    ) => (timer = setTimeout(() => r(false), READY_TIMEOUT_MS)));
    try {
      return await Promise.race([q.then(() => true as const), timeout]);
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
      q.catch(() => {}); // a late failure of an abandoned check is not an error
    }
  }

  /** Closes the probe's connection. */
  close(): Promise<void> {
    return this.#sql.end({ timeout: 1 });
  }
}
