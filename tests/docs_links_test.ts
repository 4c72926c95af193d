/** The README and docs/ are self-contained: every relative link resolves inside the repository. */
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

Deno.test("the configuration table marks every key without effect as planned", async () => {
  const { KEYS } = await import("../src/config/keys.ts");
  const { isPlanned } = await import("../src/config/planned.ts");
  const readme = await Deno.readTextFile(new URL("docs/configuration.md", root));
  for (const k of KEYS) {
    const row = readme.split("\n").find((l) => l.startsWith(`| \`${k.key}\``));
    assert.ok(row, `no row for ${k.key}`);
    assert.equal(row.includes("**planned**"), isPlanned(k.key), `${k.key}: ${row}`);
  }
});
