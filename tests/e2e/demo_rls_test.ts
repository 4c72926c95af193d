/**
 * The demo lets the database decide: demo/app.sql puts row-level security on the customer tables,
 * keyed on the session's `customer_id` claim. Through the real server and the demo's own login
 * route, a customer reads exactly their own invoices, lines and customer row, a `where` naming
 * another customer returns nothing, and anonymous requests read no customer data. (Without the
 * policies — the demo before it had them — customer 1 read every customer's 412 invoices.)
 */
import assert from "node:assert/strict";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

const repo = new URL("../../", import.meta.url).pathname;
const uri = await chinookDb("demo_rls", await Deno.readTextFile(`${repo}demo/app.sql`));
const srv = await startServer(uri, [`--http.templates.path=${repo}templates`]);

/** Logs in through the demo's POST /login and returns the session cookie header. */
async function login(email: string): Promise<HeadersInit> {
  const r = await srv.post("/login", { email, password: "demo" });
  assert.equal(r.status, 200, await r.clone().text());
  await r.body?.cancel();
  const set = r.headers.get("set-cookie") ?? "";
  const m = set.match(/accesstoken=([^;]+)/);
  assert.ok(m, "the login sets the session cookie");
  return { cookie: `accesstoken=${m[1]}` };
}

async function read(body: unknown, headers?: HeadersInit): Promise<Record<string, unknown>[]> {
  const r = await srv.post("/svc", body, headers);
  assert.equal(r.status, 200, await r.clone().text());
  return await r.json();
}

async function countFor(customer: number): Promise<number> {
  const out = await psql(
    `select count(*) from invoice where customer_id = ${customer}`,
    "demo_rls",
  );
  return Number(out.match(/\d+/)![0]);
}

Deno.test("a logged-in customer reads only their own invoices, lines and customer row", async () => {
  const me = await login("luisg@embraer.com.br"); // customer 1
  const expected = await countFor(1);
  assert.ok(expected > 0 && expected < await countFor(2) + 412, "fixture sanity");

  const invoices = await read({ relation: "invoice", select: ["invoice_id", "customer_id"] }, me);
  assert.equal(invoices.length, expected, "exactly customer 1's invoices, no client filter");
  assert.ok(invoices.every((i) => i.customer_id === 1));

  const other = await read({ relation: "invoice", where: ["=", "customer_id", 2] }, me);
  assert.deepEqual(other, [], "a where naming customer 2 returns nothing");

  const lines = await read({
    relation: "invoice_line",
    select: ["invoice_line_id", "invoice"],
    join: {
      invoice: { relation: "invoice", on: { invoice_id: "invoice_id" }, select: ["customer_id"] },
    },
  }, me);
  assert.ok(lines.length > 0);
  for (const l of lines) {
    assert.equal((l.invoice as { customer_id: number }).customer_id, 1);
  }

  const customers = await read({ relation: "customer", select: ["customer_id"] }, me);
  assert.deepEqual(customers, [{ customer_id: 1 }]);

  const second = await login("leonekohler@surfeu.de"); // customer 2
  const theirs = await read({ relation: "invoice", select: ["customer_id"] }, second);
  assert.equal(theirs.length, await countFor(2));
  assert.ok(theirs.every((i) => i.customer_id === 2));
});

Deno.test("anonymous requests read the catalogue but no customer data", async () => {
  const genres = await read({ relation: "genre", select: ["name"], limit: 1 });
  assert.equal(genres.length, 1);
  for (const relation of ["invoice", "customer", "invoice_line"]) {
    const r = await srv.post("/svc", { relation });
    const body = await r.json();
    // No privilege at all: the relation is answered as unknown (docs/endpoint.md).
    assert.equal(r.status, 404, `${relation}: no privilege, unknown to the anonymous role`);
    assert.equal(body.code, "QUERY_UNKNOWN_RELATION", relation);
  }
});

Deno.test("the demo's /invoices page renders the session's invoices, none when anonymous", async () => {
  const me = await login("luisg@embraer.com.br"); // customer 1
  const r = await srv.get("/invoices", me);
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type") ?? "", /^text\/html/);
  // The template's page carries the response's CSP nonce policy.
  assert.match(r.headers.get("content-security-policy") ?? "", /'nonce-[^']+'/);
  const html = await r.text();
  const shown = [...html.matchAll(/data-invoice="(\d+)"/g)].map((m) => Number(m[1]));
  const own = (await psql(
    "select string_agg(invoice_id::text, ',' order by invoice_id) from invoice where customer_id = 1",
    "demo_rls",
  )).match(/[\d,]+/)![0].split(",").map(Number);
  assert.deepEqual(shown.sort((a, b) => a - b), own, "exactly customer 1's invoices");
  assert.match(html, /luisg@embraer\.com\.br/);
  // An invoice without a billing address (as docs/client.md's example writes) shows empty cells.
  await psql(
    "insert into invoice (invoice_id, customer_id, invoice_date, total) overriding system value " +
      "values (99001, 1, now(), 1.98)",
    "demo_rls",
  );
  const withNulls = await (await srv.get("/invoices", me)).text();
  assert.match(withNulls, /data-invoice="99001"/);
  assert.doesNotMatch(withNulls, />null</, "a NULL shown as the text null");
  await psql("delete from invoice where invoice_id = 99001", "demo_rls");

  const anon = await srv.get("/invoices");
  assert.equal(anon.status, 200);
  const page = await anon.text();
  assert.match(page, /not logged in/);
  assert.doesNotMatch(page, /data-invoice=/);
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
