/**
 * Applies the project's patches to installed npm packages, the way patch-package does: every
 * `patches/<name>@<version>.patch` (a unified diff with paths relative to the package root) is
 * applied to `node_modules/.deno/<name>@<version>/node_modules/<name>/`. Idempotent (a hunk whose
 * result is already there is skipped); a hunk that matches neither its old nor its new text is an
 * error, so a changed package version cannot silently run unpatched.
 *
 * Run by `deno task setup` (and every task that depends on it) after `deno install`.
 */

/** One hunk: the text it replaces and the text it puts in its place. */
interface Hunk {
  old: string;
  new: string;
}

/** The hunks of a unified diff, by file path (relative to the package root). */
export function parsePatch(text: string): Map<string, Hunk[]> {
  const files = new Map<string, Hunk[]>();
  let hunks: Hunk[] | null = null;
  let cur: { old: string[]; new: string[] } | null = null;
  const flush = () => {
    if (cur && hunks) hunks.push({ old: cur.old.join("\n"), new: cur.new.join("\n") });
    cur = null;
  };
  for (const line of text.split("\n")) {
    if (line.startsWith("--- ")) {
      flush();
      continue;
    }
    if (line.startsWith("+++ ")) {
      const path = line.slice(4).trim().replace(/^b\//, "").split("\t")[0];
      hunks = [];
      files.set(path, hunks);
      continue;
    }
    if (line.startsWith("@@")) {
      flush();
      cur = { old: [], new: [] };
      continue;
    }
    if (!cur) continue;
    const c = cur as { old: string[]; new: string[] };
    if (line.startsWith("-")) c.old.push(line.slice(1));
    else if (line.startsWith("+")) c.new.push(line.slice(1));
    else if (line.startsWith(" ") || line === "") {
      c.old.push(line.slice(1));
      c.new.push(line.slice(1));
    }
  }
  flush();
  return files;
}

/** Applies `hunks` to `source`; returns the new text, or throws naming the hunk that misfits. */
export function applyHunks(source: string, hunks: Hunk[], label: string): string {
  let out = source;
  hunks.forEach((h, i) => {
    const oldText = h.old.replace(/\n+$/, "");
    const newText = h.new.replace(/\n+$/, "");
    if (out.includes(newText)) return; // already applied
    const at = out.indexOf(oldText);
    if (at < 0 || out.indexOf(oldText, at + 1) >= 0) {
      throw new Error(`${label}: hunk ${i + 1} does not match the installed file`);
    }
    out = out.slice(0, at) + newText + out.slice(at + oldText.length);
  });
  return out;
}

/** Applies every patch in `patchDir` under `nodeModules`; returns what it did, one line each. */
export async function applyPatches(patchDir: string, nodeModules: string): Promise<string[]> {
  const done: string[] = [];
  for await (const e of Deno.readDir(patchDir)) {
    const m = /^(.+)@([^@]+)\.patch$/.exec(e.name);
    if (!e.isFile || !m) continue;
    const [, file, version] = m;
    // A scoped package's patch is named `@scope+name@version.patch` (no `/` in a file name).
    const name = file.startsWith("@") ? file.replace("+", "/") : file;
    const root = `${nodeModules}/.deno/${name.replace("/", "+")}@${version}/node_modules/${name}`;
    const files = parsePatch(await Deno.readTextFile(`${patchDir}/${e.name}`));
    for (const [path, hunks] of files) {
      const file = `${root}/${path}`;
      const before = await Deno.readTextFile(file);
      const after = applyHunks(before, hunks, `${e.name} ${path}`);
      if (after !== before) {
        // A new file, renamed over the old one: Deno hard-links node_modules to its global npm
        // cache, so writing in place would patch the cache (and every other install) too.
        const tmp = `${file}.svc-patch-tmp`;
        await Deno.writeTextFile(tmp, after);
        await Deno.rename(tmp, file);
        done.push(`patched ${name}@${version} ${path}`);
      }
    }
  }
  return done;
}

if (import.meta.main) {
  const here = new URL("..", import.meta.url).pathname;
  try {
    for (const line of await applyPatches(`${here}patches`, `${here}node_modules`)) {
      console.error(line);
    }
  } catch (e) {
    console.error(`patch_deps: ${(e as Error).message}`);
    Deno.exit(1);
  }
}
