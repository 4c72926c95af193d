/**
 * docs/client.md's example runs as written (Deno, the file saved with a session as the doc says,
 * type-checked), and the bundled client works in a real browser (Chromium) on fetch alone.
 */
import assert from "node:assert/strict";
import { browserTest, launchChromium } from "../helpers/browser.ts";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { now, startServer, token } from "../helpers/server.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const flags = ["--http.typescript.enable=true", `--pg.query.wellknown_path=${ROOT}wellknown`];

/** docs/client.md's example (the file `example.ts` it runs). */
function docExample(): string {
  const doc = Deno.readTextFileSync(`${ROOT}docs/client.md`);
  const m = doc.match(/```ts\n\/\/ example\.ts\n([\s\S]*?)```/);
  assert.ok(m, "docs/client.md has its example.ts");
  return m[1];
}

Deno.test("docs/client.md's example runs as written: database.ts saved with a session", async () => {
  // As in the demo, the anonymous role cannot read invoices: its view (a URL import) lacks them.
  const db = await chinookDb(
    "chinook_client_doc",
    `revoke select on invoice, invoice_line from "~anonymous";`,
  );
  const srv = await startServer(db, flags);
  const dir = await Deno.makeTempDir({ prefix: "svc-readme-" });
  try {
    const t = now();
    const jwt = await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t });
    const host = new URL(srv.url).host;
    const anonymous = await (await fetch(`${srv.url}/svc/database.ts`)).text();
    assert.ok(!anonymous.includes('"invoice": {'), "the anonymous view has no invoice");
    // curl -s -b "accesstoken=$TOKEN" localhost:8080/svc/database.ts -o database.ts
    const saved = await fetch(`${srv.url}/svc/database.ts`, {
      headers: { cookie: `accesstoken=${jwt}` },
    });
    await Deno.writeTextFile(`${dir}/database.ts`, await saved.text());
    const code = docExample().replaceAll("localhost:8080", host) +
      "console.log(JSON.stringify({ artists: artists.length, albums: rows[0].albums.length }));\n";
    await Deno.writeTextFile(`${dir}/example.ts`, code);
    // deno run --allow-net --allow-env=TOKEN example.ts
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-config", "--check=all", "--allow-net", "--allow-env=TOKEN", "example.ts"],
      cwd: dir,
      env: { NO_COLOR: "1", DENO_DIR: `${dir}/.deno`, TOKEN: jwt },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const dec = new TextDecoder();
    assert.ok(out.success, dec.decode(out.stderr));
    assert.deepEqual(JSON.parse(dec.decode(out.stdout)), { artists: 2, albums: 2 });
  } finally {
    await srv.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

browserTest({
  name: "the bundled client runs in Chromium (same origin, fetch only)",
  async fn() {
    const srv = await startServer(await chinookDb("chinook_readme"), flags);
    const dir = await Deno.makeTempDir({ prefix: "svc-browser-" });
    const browser = await launchChromium();
    try {
      const ts = await (await fetch(`${srv.url}/svc/database.ts`)).text();
      await Deno.writeTextFile(`${dir}/database.ts`, ts);
      const b = await new Deno.Command(Deno.execPath(), {
        args: ["bundle", "--platform", "browser", "-o", `${dir}/db.js`, `${dir}/database.ts`],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.ok(b.success, new TextDecoder().decode(b.stderr));
      const js = await Deno.readTextFile(`${dir}/db.js`);
      const page = await browser.newPage();
      await page.goto(`${srv.url}/svc/health`);
      const result = await page.evaluate(async (src: string) => {
        const url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
        const m = await import(url);
        const rows = await m.relation("album", (j: Record<string, (q?: unknown) => unknown>) => ({
          where: ["=", "album_id", 1],
          select: ["title", "artist"],
          join: { artist: j.artist({ select: ["name"] }) },
        })).get();
        let code = "";
        try {
          await m.relation("no_such_table").get();
        } catch (e) {
          code = (e as { code: string }).code;
        }
        return { rows, code };
      }, js);
      assert.deepEqual(result.rows, [{
        title: "For Those About To Rock We Salute You",
        artist: { name: "AC/DC" },
      }]);
      assert.equal(result.code, "QUERY_UNKNOWN_RELATION");
    } finally {
      await browser.close();
      await srv.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("teardown", () => stopDb());
