/**
 * Tests that need a tool from the environment (a browser, Node, an independent SAML IdP) and
 * nothing else decide whether they run: the tool is found, or the test is reported as ignored with
 * a one-line notice naming the install command, or (when `SVC_REQUIRE_<X>=1`, as CI sets it) the
 * test fails because the tool is missing. Never a silent pass, never a skip decided by the product.
 */

/** A tool the environment may or may not provide. */
export interface Requirement {
  /** What it is, for messages ("Chromium", "Node"). */
  what: string;
  /** Where it was found (a path), or null. */
  path: string | null;
  /** Why it is missing (null when found). */
  missing: string | null;
  /** The environment variable that makes its absence a failure. */
  requireEnv: string;
  /** How to install it. */
  install: string;
}

/** The first executable named `name` on PATH, or null. */
export function onPath(name: string): string | null {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (!dir) continue;
    const p = `${dir}/${name}`;
    try {
      const st = Deno.statSync(p);
      if (st.isFile && (st.mode ?? 0o111) & 0o111) return p;
    } catch { /* not here */ }
  }
  return null;
}

/** Whether a file exists. */
export function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

const noticed = new Set<string>();

/**
 * Registers a test that needs `req`: run when found; when missing, ignored with a notice, or
 * failing when `req.requireEnv` is `1`.
 */
export function testWith(req: Requirement, def: Deno.TestDefinition): void {
  if (req.path) return Deno.test(def);
  const why = `${req.what} not found (${req.missing}); install: ${req.install}`;
  if (Deno.env.get(req.requireEnv) === "1") {
    return Deno.test({
      ...def,
      fn: () => {
        throw new Error(`${why} — ${req.requireEnv}=1 makes this a failure`);
      },
    });
  }
  if (!noticed.has(req.what)) {
    noticed.add(req.what);
    console.warn(`notice: ${why} — its tests are ignored (set ${req.requireEnv}=1 to fail)`);
  }
  Deno.test({ ...def, ignore: true });
}

/**
 * Node (`node` on PATH); `SVC_REQUIRE_NODE=1` makes its absence a failure. Deno puts a `node`
 * shim of its own on PATH when there is none (node_compat_bin, a link to deno): that is not Node.
 */
export const NODE: Requirement = (() => {
  const deno = Deno.realPathSync(Deno.execPath());
  let path = onPath("node");
  if (path && Deno.realPathSync(path) === deno) path = null;
  return {
    what: "Node",
    path,
    missing: path ? null : "no node on PATH",
    requireEnv: "SVC_REQUIRE_NODE",
    install: "apt-get install -y nodejs",
  };
})();
