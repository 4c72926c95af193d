/**
 * Configuration keys that are accepted but have no effect yet (their features are being built):
 * docs/configuration.md and `--help` mark them "planned". Remove a prefix when its
 * feature lands.
 */
export const PLANNED_PREFIXES: readonly string[] = [];

/** Whether a key (as written in the key table) has no effect yet. */
export function isPlanned(key: string): boolean {
  return PLANNED_PREFIXES.some((p) => p.endsWith(".") ? key.startsWith(p) : key === p);
}
