/**
 * The playground for a newcomer, in a real headless Chromium: an anonymous role that can read
 * nothing sees an explanation instead of an empty list; the login form posts to the
 * application's login route (the demo's `POST /login`) and the relation list then shows what the
 * logged-in role reads; an error clears the previous result; a long GET URL wraps inside its panel.
 * Before these were built, the list was silently empty, the previous rows stayed on screen under an
 * error, and the GET link overflowed its panel.
 */
import assert from "node:assert/strict";
import { browserTest, launchChromium } from "../helpers/browser.ts";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

const repo = new URL("../../", import.meta.url).pathname;

browserTest({
  name:
    "playground: empty-state note, log in from the page, errors clear the result, GET URL wraps",
  // Owns a browser process.
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const uri = await chinookDb(
      "pg_login",
      (await Deno.readTextFile(`${repo}demo/app.sql`)) +
        `\nrevoke select on all tables in schema public from "~anonymous";`,
    );
    const srv = await startServer(uri, ["--http.playground.enable=true"]);
    const browser = await launchChromium();
    try {
      const page = await browser.newPage({ viewport: { width: 1300, height: 800 } });
      const problems: string[] = [];
      page.on("pageerror", (e) => problems.push(String(e)));
      page.on("console", (m) => {
        if (/Content.Security.Policy/i.test(m.text())) problems.push(m.text());
      });
      await page.goto(srv.url + "/svc/playground");
      await page.waitForSelector("body[data-ready=true]");

      // Anonymous reads nothing here: the list says why and how to change it.
      const note = await page.textContent("#empty-note");
      assert.match(note ?? "", /can read nothing/);
      assert.match(note ?? "", /Log in/);

      // Log in through the demo's own login route.
      await page.click("#login-box summary");
      await page.fill("#login-body", '{"email": "luisg@embraer.com.br", "password": "demo"}');
      await page.click("#login-submit");
      await page.waitForSelector('details[data-relation="invoice"]');
      assert.equal(await page.textContent("#login-status"), "logged in");
      assert.equal(await page.$("#empty-note"), null);

      // A good query shows rows (row-level security: only this customer's invoices).
      const editor = page.locator("#editor");
      await editor.fill('{"relation": "invoice", "select": ["invoice_id", "customer_id"]}');
      await page.click("#run");
      await page.waitForSelector("#tab-table table.rows");
      const customers = await page.$$eval(
        "#tab-table table.rows tbody tr td:nth-child(2)",
        (tds) => [...new Set(tds.map((t) => t.textContent))],
      );
      assert.deepEqual(customers, ["1"]);

      // An error clears it: no earlier rows or JSON stay on screen.
      await editor.fill('{"relation": "invoice", "select": ["no_such_column"]}');
      await page.click("#run");
      await page.waitForSelector("#error:not([hidden])");
      assert.equal(await page.$("#tab-table table.rows"), null, "the previous rows are gone");
      assert.equal(await page.textContent("#tab-json"), "");
      // The same for a JSON syntax error.
      await editor.fill('{"relation": "invoice"}');
      await page.click("#run");
      await page.waitForSelector("#tab-table table.rows");
      await editor.fill('{"relation": ');
      await page.click("#run");
      await page.waitForSelector("#error:not([hidden])");
      assert.equal(await page.$("#tab-table table.rows"), null);

      // A long GET URL wraps inside its panel.
      const ids = Array.from({ length: 120 }, (_, i) => i + 1);
      await editor.fill(
        JSON.stringify({ relation: "invoice", where: ["in", "invoice_id", ...ids] }),
      );
      await page.click("#run");
      await page.waitForSelector("#tab-table table.rows");
      await page.click('#tabs button[data-tab="get"]');
      const box = await page.$eval("#tab-get", (e) => ({ sw: e.scrollWidth, cw: e.clientWidth }));
      const link = await page.textContent("#get-link");
      assert.ok((link ?? "").length > 400, "a long URL");
      assert.ok(box.sw <= box.cw, `the GET panel does not overflow (${box.sw} > ${box.cw})`);

      // Log out: back to the anonymous view.
      await page.click("#login-box summary");
      await page.click("#logout-submit");
      await page.waitForSelector("#empty-note");
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
      await srv.stop();
      await stopDb();
    }
  },
});
