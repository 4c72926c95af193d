/**
 * The templates directory checked when routes load (src/state/template_files.ts): a missing
 * directory with routes declared, a route's declared template without its file, and nothing to say
 * without routes or when every file is there.
 */
import assert from "node:assert/strict";
import { templateFile, templateWarnings } from "../../src/state/template_files.ts";
import type { Route } from "../../src/state/route_table.ts";

function route(source: string, template: string | null): Route {
  // Only `source` and `template` are read by the check.
  return { source, template } as unknown as Route;
}

Deno.test("templateFile adds .eta to a name without an extension, as rendering does", () => {
  assert.equal(templateFile("invoices"), "invoices.eta");
  assert.equal(templateFile("parts/footer"), "parts/footer.eta");
  assert.equal(templateFile("page.html"), "page.html");
  assert.equal(templateFile("v1.2/page"), "v1.2/page.eta");
});

Deno.test("a missing templates directory is reported once routes exist", async () => {
  const root = await Deno.makeTempDir({ prefix: "svc-tplcheck-" });
  try {
    const missing = `${root}/template`;
    assert.deepEqual(await templateWarnings(missing, []), [], "no routes: nothing renders");
    const w = await templateWarnings(missing, [route("comment on function app.me", null)]);
    assert.equal(w.length, 1);
    assert.match(w[0], /http\.templates\.path ".*\/template" is not a directory/);
    assert.match(w[0], /500 INTERNAL/);
    // A file where the directory should be is no better.
    await Deno.writeTextFile(missing, "");
    assert.equal((await templateWarnings(missing, [route("r", null)])).length, 1);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("a route's declared template without its file is reported; present files are not", async () => {
  const dir = await Deno.makeTempDir({ prefix: "svc-tplcheck-" });
  try {
    await Deno.mkdir(`${dir}/parts`);
    await Deno.writeTextFile(`${dir}/invoices.eta`, "x");
    await Deno.writeTextFile(`${dir}/parts/list.html`, "x");
    const w = await templateWarnings(dir, [
      route("route.app.invoices", "invoices"),
      route("route.app.list", "parts/list.html"),
      route("route.app.me", null),
      route("comment on function app.report", "report"),
    ]);
    assert.equal(w.length, 1, w.join("\n"));
    assert.match(w[0], /^comment on function app\.report declares template "report"/);
    assert.ok(w[0].includes(`${dir}/report.eta does not exist`), w[0]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
