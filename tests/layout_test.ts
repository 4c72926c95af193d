/**
 * The source tree's layout (docs/layout.md): no import cycle among src/ modules (type-only imports
 * included), no import from a lower room into a higher one, at most 3 files at src/ top level and
 * no file name repeated across rooms. The import graph is `deno info --json` of every src/ module.
 */
import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);
const SRC = new URL("src/", ROOT);

/**
 * The rooms from the lowest to the highest: a module may import from its own room and from the
 * rooms of an earlier rank only. A room is a folder under src/ ("(top)": src/ itself).
 */
const RANKS: string[][] = [
  ["(top)", "util", "formats", "pg"],
  ["observe"],
  ["auth"],
  ["db"],
  ["config"],
  ["compile", "write", "wellknown", "request"],
  ["state"],
  ["query", "client"],
  ["http", "http/routes", "sso"],
  ["process"],
];

/** File names that are the conventional entry of their own folder and may repeat. */
const REPEAT_OK = new Set<string>();

async function srcFiles(dir = SRC, out: string[] = []): Promise<string[]> {
  for await (const e of Deno.readDir(dir)) {
    const url = new URL(e.name + (e.isDirectory ? "/" : ""), dir);
    if (e.isDirectory) await srcFiles(url, out);
    else if (e.name.endsWith(".ts")) out.push(url.href);
  }
  return out.sort();
}

/** `src/` module → the `src/` modules it imports (code or type). */
async function importGraph(): Promise<Map<string, Set<string>>> {
  const files = await srcFiles();
  const entry = await Deno.makeTempFile({ suffix: ".ts" });
  try {
    await Deno.writeTextFile(entry, files.map((f) => `import type {} from "${f}";\n`).join(""));
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", entry],
      cwd: ROOT.pathname,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(out.success, new TextDecoder().decode(out.stderr));
    const info = JSON.parse(new TextDecoder().decode(out.stdout)) as {
      modules: {
        specifier: string;
        dependencies?: { code?: { specifier: string }; type?: { specifier: string } }[];
      }[];
    };
    const graph = new Map<string, Set<string>>();
    for (const m of info.modules) {
      if (!m.specifier.startsWith(SRC.href)) continue;
      const deps = new Set<string>();
      for (const d of m.dependencies ?? []) {
        for (const s of [d.code?.specifier, d.type?.specifier]) {
          if (s?.startsWith(SRC.href)) deps.add(s.slice(SRC.href.length));
        }
      }
      graph.set(m.specifier.slice(SRC.href.length), deps);
    }
    return graph;
  } finally {
    await Deno.remove(entry);
  }
}

/** The room of a module path relative to src/. */
function room(path: string): string {
  const parts = path.split("/");
  if (parts.length === 1) return "(top)";
  const two = parts.slice(0, 2).join("/");
  return parts.length > 2 && RANKS.some((r) => r.includes(two)) ? two : parts[0];
}

function rank(r: string): number {
  return RANKS.findIndex((rs) => rs.includes(r));
}

Deno.test("layout: no import cycle among src/ modules (type-only imports included)", async () => {
  const graph = await importGraph();
  assert.ok(graph.size > 50, `only ${graph.size} modules found`);
  // Tarjan's strongly connected components: every one of more than one module is a cycle.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const cycles: string[][] = [];
  let n = 0;
  const visit = (v: string) => {
    index.set(v, n);
    low.set(v, n++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const comp: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        comp.push(w);
      } while (w !== v);
      if (comp.length > 1 || graph.get(v)?.has(v)) cycles.push(comp.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  assert.deepEqual(cycles, []);
});

Deno.test("layout: every import goes to the same room or a lower one", async () => {
  const graph = await importGraph();
  const unknown = new Set<string>();
  const upward: string[] = [];
  for (const [from, deps] of graph) {
    const a = room(from);
    if (rank(a) < 0) unknown.add(a);
    for (const to of deps) {
      const b = room(to);
      if (rank(b) < 0) unknown.add(b);
      else if (rank(b) > rank(a)) upward.push(`${from} → ${to}`);
    }
  }
  assert.deepEqual(
    [...unknown],
    [],
    "rooms missing from RANKS (tests/layout_test.ts, docs/layout.md)",
  );
  assert.deepEqual(upward, []);
});

Deno.test("layout: at most 3 files at src/ top level, no file name repeated", async () => {
  const files = (await srcFiles()).map((f) => f.slice(SRC.href.length));
  const top = files.filter((f) => !f.includes("/"));
  assert.ok(top.length <= 3, `src/ top level holds ${top.join(", ")}`);
  const byName = new Map<string, string[]>();
  for (const f of files) {
    const name = f.split("/").pop()!;
    byName.set(name, [...byName.get(name) ?? [], f]);
  }
  const repeated = [...byName].filter(([name, fs]) => fs.length > 1 && !REPEAT_OK.has(name));
  assert.deepEqual(repeated, []);
});
