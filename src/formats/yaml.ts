/**
 * The YAML parser, loaded on first need: `npm:yaml` costs ~100 ms of start-up, and most
 * deployments never read YAML. The import specifier is static, so `deno compile` still bundles it.
 */
type YamlModule = typeof import("yaml");

let mod: YamlModule | null = null;

/** Loads the YAML parser (idempotent). */
export async function loadYaml(): Promise<void> {
  mod ??= await import("yaml");
}

/** Parses YAML; `loadYaml()` must have completed. */
export function parseYaml(text: string): unknown {
  if (!mod) throw new Error("internal: the YAML parser is not loaded (call loadYaml first)");
  return mod.parse(text);
}
