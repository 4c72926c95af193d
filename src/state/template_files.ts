/**
 * What a reload says about `http.templates.path` (docs/routes.md, "Templates"): a route that
 * answers with a template whose file is missing fails with 500 INTERNAL at request time, so a
 * missing directory (the container's default `/template` on a host without it) or a template a
 * route declares without its file is logged when the routes are loaded, not first met by a user.
 * Kept apart from src/http/templates.ts, which loads Eta: a reload never needs it.
 *
 * @module
 */
import type { Route } from "./route_table.ts";

/** The file a template name renders (src/http/templates.ts: `.eta` added without an extension). */
export function templateFile(name: string): string {
  const last = name.slice(name.lastIndexOf("/") + 1);
  return /\.[^/]+$/.test(last) ? name : `${name}.eta`;
}

/**
 * Warnings about the templates directory for the declared `routes` (none without routes: no
 * answer renders a template then): the directory missing or not a directory, or a route's
 * declared template missing from it.
 */
export async function templateWarnings(dir: string, routes: readonly Route[]): Promise<string[]> {
  if (routes.length === 0) return [];
  let isDir = false;
  try {
    isDir = (await Deno.stat(dir)).isDirectory;
  } catch { /* missing or unreadable: reported below */ }
  if (!isDir) {
    return [
      `http.templates.path ${JSON.stringify(dir)} is not a directory: ` +
      "a route answering with a template fails with 500 INTERNAL",
    ];
  }
  const out: string[] = [];
  for (const r of routes) {
    if (r.template === null) continue;
    const file = templateFile(r.template);
    try {
      if ((await Deno.stat(`${dir}/${file}`)).isFile) continue;
    } catch { /* missing: reported */ }
    out.push(
      `${r.source} declares template ${JSON.stringify(r.template)}, but ${dir}/${file} ` +
        "does not exist: its answers fail with 500 INTERNAL",
    );
  }
  return out;
}
