/**
 * The query playground in a real headless Chromium (Debian chromium + playwright-core) on the
 * Chinook demo: the page loads under its strict nonce CSP without violations, lists relations,
 * completes `artist` and a join to `album`, runs the query and shows rows, shows the SQL, and
 * highlights the JSON pointer of an error in the editor. Screenshots go to docs/ when
 * SVC_UPDATE_SCREENSHOTS=1.
 */
import assert from "node:assert/strict";
import { browserTest, launchChromium } from "../helpers/browser.ts";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { now, startServer, token } from "../helpers/server.ts";
import { loadConfig } from "../../src/config/load.ts";

/** The browser tests: ignored, or failing under SVC_REQUIRE_BROWSER=1, without a browser. */
const test = browserTest;

const uri = await chinookDb();
// Screenshots for the README: written to docs/ with SVC_UPDATE_SCREENSHOTS=1, else to a temp dir
// (so a test run does not rewrite tracked files).
const shots = Deno.env.get("SVC_UPDATE_SCREENSHOTS") === "1"
  ? new URL("../../docs/", import.meta.url)
  : new URL(`file://${await Deno.makeTempDir({ prefix: "svc-shots-" })}/`);

Deno.test("the playground is off by default outside dev mode", async () => {
  const srv = await startServer(uri);
  try {
    const res = await srv.get("/svc/playground");
    assert.equal(res.status, 404);
    await res.body?.cancel();
  } finally {
    await srv.stop();
  }
});

Deno.test("the page is self-contained, with a fresh nonce per response", async () => {
  const srv = await startServer(uri, ["--http.playground.enable=true"]);
  try {
    const a = await srv.get("/svc/playground");
    const b = await srv.get("/svc/playground");
    assert.equal(a.status, 200);
    assert.match(a.headers.get("content-type")!, /^text\/html/);
    const csp = a.headers.get("content-security-policy")!;
    const nonce = /script-src 'nonce-([^']+)'/.exec(csp)![1];
    assert.notEqual(
      nonce,
      /script-src 'nonce-([^']+)'/.exec(b.headers.get("content-security-policy")!)![1],
    );
    assert.match(csp, /default-src 'none'/);
    assert.doesNotMatch(csp, /unsafe/);
    const html = await a.text();
    await b.body?.cancel();
    assert.ok(html.includes(`<script nonce="${nonce}">`));
    assert.ok(html.includes(`<style nonce="${nonce}">`));
    assert.doesNotMatch(html, /<script[^>]+src=|<link[^>]+href="(?!data:)|https?:\/\/(?!127)/);
  } finally {
    await srv.stop();
  }
});

test("playground in Chromium: pick artist, complete a join to album, run, SQL, error pointer", async () => {
  const srv = await startServer(uri, [
    "--http.playground.enable=true",
    "--pg.query.allow_sql=true",
    "--pg.query.allow_query_plan=true",
    `--pg.query.wellknown_path=${new URL("../../wellknown", import.meta.url).pathname}`,
  ]);
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 860 } });
    const problems: string[] = [];
    page.on("console", (m) => {
      // The deliberate bad query below is reported by Chromium as a failed (400) resource.
      if (/status of 400/.test(m.text())) return;
      if (m.type() === "error" || /Content.Security.Policy/i.test(m.text())) {
        problems.push(m.text());
      }
    });
    page.on("pageerror", (e) => problems.push(String(e)));
    await page.goto(srv.url + "/svc/playground");
    await page.waitForSelector("body[data-ready=true]");
    // The schema browser lists Chinook's relations with their columns and foreign keys.
    await page.click('details[data-relation="album"] summary');
    const albumInfo = await page.textContent('details[data-relation="album"]');
    assert.match(albumInfo!, /artist_id → artist\(artist_id\)/);

    // Well-known queries are listed with their params; a click puts one in the editor.
    const wk = srv.server.runtime.state!.wellknown.list();
    assert.ok(wk.length > 0);
    const listed = await page.$$eval("#wellknown li a", (l) => l.map((x) => x.textContent));
    assert.deepEqual(listed, wk.map((w) => w.name));
    await page.click("#wellknown li a");
    assert.deepEqual(Object.keys(JSON.parse(await page.locator("#editor").inputValue())), [
      "wellknown",
      "params",
    ]);

    // Type the relation name and accept the completion.
    const editor = page.locator("#editor");
    await editor.fill("");
    await editor.pressSequentially('{"relation": "art');
    await page.waitForSelector('#completions li[data-label="artist"]');
    const offered = await page.$$eval("#completions li", (l) => l.map((x) => x.dataset.label));
    assert.ok(offered.includes("artist"), String(offered));
    // Arrow keys move through the offers (wrapping around); Enter accepts.
    for (let i = 0; i < offered.length; i++) await editor.press("ArrowDown");
    assert.equal(await page.getAttribute("#completions li.active", "data-label"), offered[0]);
    while ((await page.getAttribute("#completions li.active", "data-label")) !== "artist") {
      await editor.press("ArrowDown");
    }
    await editor.press("Enter");
    assert.equal(await editor.inputValue(), '{"relation": "artist"');

    // Complete a join: the keys inside "join" are the relations linked by a foreign key.
    await editor.pressSequentially(', "where": ["<", "artist_id", 4], "join": {"al');
    await page.waitForSelector('#completions li[data-label="album"]');
    await editor.press("Enter");
    await editor.pressSequentially("}}");
    const text = await editor.inputValue();
    assert.deepEqual(JSON.parse(text), {
      relation: "artist",
      where: ["<", "artist_id", 4],
      join: { album: { relation: "album", on: { artist_id: "artist_id" } } },
    });

    await editor.press("ControlOrMeta+Enter");
    await page.waitForSelector("#tab-table table.rows");
    const rows = await page.$$eval("#tab-table > div > table.rows > tbody > tr", (r) => r.length);
    assert.equal(rows, 3);
    const first = await page.textContent("#tab-table > div > table.rows > tbody > tr");
    assert.match(first!, /AC\/DC/);
    // Nested album arrays expand.
    await page.click("#tab-table > div > table.rows > tbody > tr details summary");
    assert.match(
      (await page.textContent("#tab-table > div > table.rows > tbody > tr details"))!,
      /For Those About To Rock/,
    );
    await page.screenshot({ path: new URL("playground-table.png", shots).pathname });

    // SQL tab: tick sql, run again, see the SELECT.
    await page.check("#opt-sql");
    await page.click("#run");
    await page.waitForSelector('#tab-sql:has-text("select")', { state: "attached" });
    await page.click('#tabs button[data-tab="sql"]');
    assert.ok(await page.isVisible("#tab-sql"));
    assert.match((await page.textContent("#tab-sql"))!, /"album"/);
    await page.screenshot({ path: new URL("playground-sql.png", shots).pathname });

    // Plan tab: tick query_plan, run, see the database's plan.
    await page.check("#opt-plan");
    await page.click("#run");
    await page.waitForSelector('#tab-plan:has-text("Node Type")', { state: "attached" });
    await page.click('#tabs button[data-tab="plan"]');
    assert.ok(await page.isVisible("#tab-plan"));
    await page.uncheck("#opt-plan");

    // GET form and curl line.
    await page.click('#tabs button[data-tab="get"]');
    const href = await page.getAttribute("#get-link", "href");
    const viaGet = await fetch(href!);
    assert.equal(viaGet.status, 200);
    assert.equal((await viaGet.json()).length, 3);
    assert.match((await page.textContent("#curl"))!, /^curl -s 'http:\/\/127\.0\.0\.1/);

    // An error: its code, message and pointer; the pointed value is highlighted in the editor.
    await page.uncheck("#opt-sql");
    await editor.fill(JSON.stringify(
      { relation: "artist", where: ["=", "no_such_column", 1], limit: 2 },
      null,
      2,
    ));
    await page.click("#run");
    await page.waitForSelector("#error:not([hidden])");
    const code = await page.textContent("#error-code");
    const pointer = JSON.parse((await page.textContent("#error-pointer"))!);
    assert.match(code!, /^QUERY_/);
    assert.match(pointer, /^\/where/);
    const marked = await page.textContent("#backdrop mark");
    assert.equal(marked, '"no_such_column"');
    const sel = await editor.evaluate((e) => {
      const t = e as unknown as { value: string; selectionStart: number; selectionEnd: number };
      return t.value.slice(t.selectionStart, t.selectionEnd);
    });
    assert.equal(sel, '"no_such_column"');
    await page.screenshot({ path: new URL("playground-error.png", shots).pathname });

    assert.deepEqual(problems, []);
  } finally {
    await browser.close();
    await srv.stop();
  }
});

Deno.test("--dev turns the playground on", () => {
  assert.equal(loadConfig({ args: ["--dev"], env: {} }).http.playground.enable, true);
  assert.equal(loadConfig({ args: [], env: {} }).http.playground.enable, false);
});

test("the page uses the browser's session cookie: a role sees what it may see", async () => {
  const cUri = await chinookDb(
    "play_roles",
    `do $$ begin
       if not exists (select from pg_roles where rolname = 'play_reader') then
         create role play_reader nologin;
       end if;
     end $$;
     grant usage on schema public to play_reader;
     grant select on artist to play_reader;
     grant play_reader to current_user;`,
  );
  const srv = await startServer(cUri, ["--http.playground.enable=true"]);
  const browser = await launchChromium();
  try {
    const ctx = await browser.newContext();
    const tok = await token({ role: "play_reader", iat: now(), exp: now() + 600 });
    await ctx.addCookies([{ name: "accesstoken", value: tok, url: srv.url }]);
    const page = await ctx.newPage();
    await page.goto(srv.url + "/svc/playground");
    await page.waitForSelector("body[data-ready=true]");
    const names = await page.$$eval("#relations details", (l) => l.map((x) => x.dataset.relation));
    assert.deepEqual(names, ["artist"]);
    const anon = await browser.newPage();
    await anon.goto(srv.url + "/svc/playground");
    await anon.waitForSelector("body[data-ready=true]");
    const all = await anon.$$eval("#relations details", (l) => l.map((x) => x.dataset.relation));
    assert.ok(all.includes("album") && all.includes("track"), String(all));
  } finally {
    await browser.close();
    await srv.stop();
  }
});

Deno.test("stop", async () => {
  if (!shots.pathname.endsWith("/docs/")) await Deno.remove(shots, { recursive: true });
  await stopDb();
});
