/**
 * The browser for browser tests: `SVC_CHROMIUM` (a path) when set, else the first of `chromium`,
 * `chromium-browser`, `google-chrome` on PATH. Without one the browser tests are ignored with a
 * notice, or fail under `SVC_REQUIRE_BROWSER=1` (CI). Every browser test registers through
 * `browserTest` and launches through `launchChromium`.
 */
import { type Browser, chromium } from "playwright-core";
import { exists, onPath, type Requirement, testWith } from "./requires.ts";

/** The Chromium found in this environment (`path` null when none). */
export const CHROMIUM: Requirement = (() => {
  const base = {
    what: "Chromium",
    requireEnv: "SVC_REQUIRE_BROWSER",
    install: "apt-get install -y chromium",
  };
  const chosen = Deno.env.get("SVC_CHROMIUM");
  if (chosen) {
    return exists(chosen)
      ? { ...base, path: chosen, missing: null }
      : { ...base, path: null, missing: `SVC_CHROMIUM=${chosen} does not exist` };
  }
  for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
    const path = onPath(name);
    if (path) return { ...base, path, missing: null };
  }
  return { ...base, path: null, missing: "no chromium, chromium-browser or google-chrome on PATH" };
})();

/** Registers a test that needs the browser (ignored or failing without one, see above). */
export function browserTest(def: Deno.TestDefinition): void;
/** Registers a test that needs the browser, by name and body. */
export function browserTest(name: string, fn: () => Promise<void>): void;
export function browserTest(
  def: Deno.TestDefinition | string,
  fn?: () => Promise<void>,
): void {
  testWith(CHROMIUM, typeof def === "string" ? { name: def, fn: fn! } : def);
}

/** Launches the found Chromium headless (throws when there is none). */
export function launchChromium(): Promise<Browser> {
  if (!CHROMIUM.path) throw new Error(`Chromium not found: ${CHROMIUM.missing}`);
  return chromium.launch({ executablePath: CHROMIUM.path, headless: true, args: ["--no-sandbox"] });
}
