/**
 * The demo page (demo/static/, served as static files) in a real headless Chromium (Debian
 * `chromium` driven by playwright-core): log in through `POST /login`, see the user's invoices
 * read through `POST /svc`, reload and stay logged in (session cookie), follow the link to the same
 * invoices rendered on the server (`GET /invoices`: a route of demo/app.sql and
 * templates/invoices.eta), log out. The pages run under the server's CSP: any violation fails the
 * test.
 *
 * The login flow needs the declared routes of demo/app.sql (the demo login contract): a missing
 * demo/app.sql or a broken login fails here; only a missing browser makes these tests ignored
 * (tests/helpers/browser.ts). `SVC_DEMO_SCREENSHOT=1` (or a path) writes a screenshot of the
 * logged-in page (default docs/demo.png).
 */
import assert from "node:assert/strict";
import { browserTest, CHROMIUM, launchChromium } from "../helpers/browser.ts";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { startServer, type TestServer } from "../helpers/server.ts";

const repo = new URL("../../", import.meta.url).pathname;

async function setup(): Promise<TestServer> {
  const appSql = await Deno.readTextFile(`${repo}demo/app.sql`);
  const uri = await chinookDb("demo_browser", appSql);
  return await startServer(uri, [
    `--http.static.path=${repo}demo/static`,
    `--http.templates.path=${repo}templates`,
  ]);
}
// Nothing is started without a browser: the tests below are then ignored (or fail in CI).
const srv = CHROMIUM.path ? await setup() : null;
const base = srv?.url ?? "";

/** A browser page on the server, failing on CSP violations and page errors. */
async function open() {
  const browser = await launchChromium();
  const context = await browser.newContext({ viewport: { width: 1000, height: 760 } });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on("console", (m) => {
    // Anonymous GET /me is 401 by contract: not a problem.
    if (m.type() === "error" && !/status of 401/.test(m.text())) problems.push(m.text());
  });
  page.on("pageerror", (e) => problems.push(String(e)));
  return { browser, context, page, problems };
}

browserTest({
  name: "demo page loads in Chromium under the server's CSP (no violation, no script error)",
  async fn() {
    const { browser, page, problems } = await open();
    try {
      const res = await page.goto(base + "/");
      assert.equal(res?.status(), 200);
      assert.match(res!.headers()["content-security-policy"], /script-src 'self' 'nonce-/);
      // Polled from here: a string predicate would be evaluated in the page, where the CSP
      // (no 'unsafe-eval') may refuse it.
      const end = Date.now() + 10_000;
      while ((await page.textContent("#status")) === "Loading…") {
        assert.ok(Date.now() < end, "the page never left its loading state");
        await new Promise((r) => setTimeout(r, 50));
      }
      // The demo's routes answer: the login form is shown, not the "no /login route" notice.
      assert.equal(await page.textContent("#status"), "");
      assert.equal(await page.isVisible("#login"), true);
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
    }
  },
});

browserTest({
  name: "demo page: log in, see the invoices, reload and stay logged in, log out",
  async fn() {
    // What the page must show: customer 1's invoices, newest first (read as the superuser: row-level
    // security lets no anonymous request read invoices).
    const expected = (await psql(
      "select invoice_id from invoice where customer_id = 1 order by invoice_date desc",
      "demo_browser",
    )).split("\n").map((l) => l.trim()).filter((l) => /^\d+$/.test(l))
      .map((l) => ({ invoice_id: Number(l) }));
    assert.ok(expected.length > 0);
    const { browser, page, problems } = await open();
    try {
      await page.goto(base + "/");
      await page.waitForSelector("#login", { state: "visible" });
      // Wrong password: the route's RS401 message is shown, no session.
      await page.fill("#email", "luisg@embraer.com.br");
      await page.fill("#password", "wrong");
      await page.click("#login-button");
      await page.waitForSelector("#login-error", { state: "visible" });
      assert.match(await page.textContent("#login-error") ?? "", /invalid e-mail or password/);
      // Log in.
      await page.fill("#password", "demo");
      await page.click("#login-button");
      await page.waitForSelector("tr.invoice");
      assert.equal(await page.textContent("#who"), "luisg@embraer.com.br");
      const ids = async () =>
        await page.$$eval("tr.invoice td:first-child", (tds) => tds.map((t) => t.textContent));
      assert.deepEqual(await ids(), expected.map((i) => String(i.invoice_id)));
      // The database decides, not the page: from the logged-in page, a where naming customer 2
      // returns nothing (row-level security of demo/app.sql).
      const foreign = await page.evaluate(async () => {
        const r = await fetch("/svc", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ relation: "invoice", where: ["=", "customer_id", 2] }),
        });
        return { status: r.status, body: await r.json() };
      });
      assert.deepEqual(foreign, { status: 200, body: [] });
      const shot = Deno.env.get("SVC_DEMO_SCREENSHOT");
      if (shot) {
        const path = shot === "1" ? `${repo}docs/demo.png` : shot;
        await Deno.mkdir(path.replace(/\/[^/]*$/, ""), { recursive: true });
        await page.screenshot({ path, fullPage: true });
      }
      // Reload: the session cookie keeps the user logged in.
      await page.reload();
      await page.waitForSelector("tr.invoice");
      assert.equal(await page.textContent("#who"), "luisg@embraer.com.br");
      assert.deepEqual(await ids(), expected.map((i) => String(i.invoice_id)));
      // The same invoices rendered on the server: route app.invoices_page, templates/invoices.eta.
      await page.click("#invoices-page");
      await page.waitForSelector("tr[data-invoice]");
      const rendered = await page.$$eval(
        "tr[data-invoice]",
        (trs) => trs.map((t) => Number(t.getAttribute("data-invoice"))),
      );
      assert.deepEqual(
        rendered.sort((a, b) => a - b),
        expected.map((i) => i.invoice_id).sort((a, b) => a - b),
      );
      assert.match(await page.textContent("main") ?? "", /luisg@embraer\.com\.br/);
      // The stylesheet (demo/static/app.css) applied under the page's CSP.
      assert.equal(
        await page.$eval("html", (h) => getComputedStyle(h).fontFamily),
        "system-ui, sans-serif",
      );
      await page.goto(base + "/");
      await page.waitForSelector("tr.invoice");
      // Log out, and stay logged out after a reload.
      await page.click("#logout");
      await page.waitForSelector("#login", { state: "visible" });
      await page.reload();
      await page.waitForSelector("#login", { state: "visible" });
      assert.equal(await page.isVisible("#account"), false);
      // Logged out, the rendered page shows no invoice.
      await page.goto(base + "/invoices");
      assert.match(await page.textContent("main") ?? "", /not logged in/);
      assert.equal(await page.$$eval("tr[data-invoice]", (trs) => trs.length), 0);
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
    }
  },
});

browserTest({
  name: "teardown",
  async fn() {
    await srv?.stop();
    await stopDb();
  },
});
