/**
 * The README and docs/ are self-contained: every relative link resolves inside the repository, and
 * no source comment cites a document the repository does not hold.
 */
import assert from "node:assert/strict";

const root = new URL("../", import.meta.url);

async function markdownFiles(): Promise<URL[]> {
  const out = [new URL("README.md", root)];
  for await (const e of Deno.readDir(new URL("docs/", root))) {
    if (e.isFile && e.name.endsWith(".md")) out.push(new URL(`docs/${e.name}`, root));
  }
  return out;
}

function anchors(md: string): Set<string> {
  const out = new Set<string>();
  for (const m of md.matchAll(/^#+\s+(.+)$/gm)) {
    out.add(m[1].toLowerCase().replace(/[^\w\- ]/g, "").replace(/ /g, "-"));
  }
  return out;
}

Deno.test("README and docs link only inside the repository, and every link resolves", async () => {
  for (const file of await markdownFiles()) {
    const text = await Deno.readTextFile(file);
    assert.ok(!text.includes("../shared"), `${file.pathname} mentions ../shared`);
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1];
      if (/^[a-z]+:/i.test(target)) continue; // external URL
      const [path, hash] = target.split("#");
      const dest = path ? new URL(path, file) : file;
      assert.ok(dest.href.startsWith(root.href), `${target} leaves the repository`);
      const stat = await Deno.stat(dest).catch(() => null);
      assert.ok(stat, `${file.pathname}: broken link ${target}`);
      if (hash && stat.isFile && dest.pathname.endsWith(".md")) {
        assert.ok(anchors(await Deno.readTextFile(dest)).has(hash), `missing anchor ${target}`);
      }
    }
  }
});

Deno.test("the README is the first hour: under 400 lines, the rest in docs/", async () => {
  const lines = (await Deno.readTextFile(new URL("README.md", root))).split("\n").length;
  assert.ok(lines < 400, `README.md has ${lines} lines`);
});

Deno.test("docs/configuration.md's table is what scripts/config_reference.ts prints", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("scripts/config_reference.ts", root).pathname],
    stdout: "piped",
  }).output();
  assert.ok(out.success);
  // Rows compared cell by cell (deno fmt pads the table in the document).
  const rows = (text: string) =>
    text.split("\n").filter((l) => l.startsWith("| `")).map((l) =>
      l.split(/(?<!\\)\|/).map((c) => c.trim()).join("|")
    );
  const generated = rows(new TextDecoder().decode(out.stdout));
  const documented = rows(await Deno.readTextFile(new URL("docs/configuration.md", root)));
  assert.ok(generated.length > 100);
  assert.deepEqual(documented, generated, "run: deno run -A scripts/config_reference.ts");
});

/** Every file under `dir` (relative to the repository), recursively. */
async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(new URL(dir, root))) {
    const path = `${dir}${e.name}`;
    if (e.isDirectory && !["node_modules", ".data", ".peer", "results"].includes(e.name)) {
      out.push(...await filesUnder(`${path}/`));
    } else if (e.isFile) out.push(path);
  }
  return out;
}

Deno.test("no source names a document outside the repository (DECISIONS.md, SPEC.md)", async () => {
  const self = "tests/docs_links_test.ts";
  const sources = [
    "main.ts",
    ...(await Promise.all(["src/", "scripts/", "bench/", "tests/"].map(filesUnder))).flat(),
  ]
    .filter((f) => /\.(ts|js|html|css|sql|json)$/.test(f) && f !== self);
  assert.ok(sources.length > 100);
  const cited: string[] = [];
  for (const file of sources) {
    const lines = (await Deno.readTextFile(new URL(file, root))).split("\n");
    lines.forEach((line, i) => {
      if (/DECISIONS|\bSPEC\b/.test(line)) cited.push(`${file}:${i + 1}: ${line.trim()}`);
    });
  }
  assert.deepEqual(cited, [], "cite README.md or docs/*.md instead");
});
