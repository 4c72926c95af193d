/**
 * Which environment variables are configuration: `SVC_CONFIG` (the file) and `SVC_` names holding
 * `__` (`SVC_PG__POOL_SIZE` is `pg.pool_size`). Container platforms inject `SVC_PORT=tcp://…`,
 * `SVC_SERVICE_HOST` and the like for a service named svc; those are ignored (logged at debug).
 */

/** Whether an environment variable is a configuration entry (other than SVC_CONFIG). */
export function isConfigEnv(name: string): boolean {
  return name.startsWith("SVC_") && name !== "SVC_CONFIG" && name.slice(4).includes("__");
}

/** `SVC_` variables that are not configuration and are ignored. */
export function ignoredEnv(env: Record<string, string>): string[] {
  return Object.keys(env).filter((n) =>
    n.startsWith("SVC_") && n !== "SVC_CONFIG" && !isConfigEnv(n)
  ).sort();
}
