/**
 * The demo's server-rendered page (`GET /invoices`: demo/app.sql's route and
 * templates/invoices.eta) says whose invoices it shows: a customer's, which row-level security
 * narrows to theirs, or a role that is no customer (an SSO login's `app_user`, the demo's staff),
 * which reads what its policies allow — not "this customer's … only" with "customer null", as it
 * did for the `--with-oidc` login (found by a new user).
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const repo = new URL("../../", import.meta.url).pathname;
const uri = await chinookDb("demo_invoices", await Deno.readTextFile(`${repo}demo/app.sql`));
const srv = await startServer(uri, [`--http.templates.path=${repo}templates`]);

async function page(claims: Record<string, unknown>): Promise<string> {
  const t = now();
  const res = await srv.get(
    "/invoices",
    cookie(await token({ ...claims, iat: t, exp: t + 600, auth_time: t })),
  );
  assert.equal(res.status, 200);
  return await res.text();
}

Deno.test("GET /invoices names the customer, or says the role is no customer", async () => {
  const customer = await page({ role: "customer", email: "luisg@embraer.com.br", customer_id: 1 });
  assert.match(customer, /\(customer 1\)/);
  assert.match(customer, /returns this\s+customer's 7 only/);
  const staff = await page({ role: "app_user", email: "alice@example.com", customer_id: null });
  assert.doesNotMatch(staff, /customer null|this\s+customer's/);
  assert.match(staff, /role <code>app_user<\/code>, not a\s+Chinook customer/);
  assert.match(staff, /reads what its grants and row-level policies allow: 412/);
});

Deno.test({
  name: "demo invoices: stop",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await srv.stop();
    await stopDb();
  },
});
