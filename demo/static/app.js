// svc demo page: log in through POST /login (a declared route that mints the session cookie),
// read the user's invoices through POST /svc, log out through POST /logout. No inline script:
// the page's Content-Security-Policy allows scripts from 'self' and nonce-carrying ones only.
"use strict";

const $ = (id) => document.getElementById(id);

async function call(method, path, body) {
  const res = await fetch(path, {
    method,
    credentials: "same-origin",
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { message: text };
  }
  return { status: res.status, data };
}

function show(which) {
  $("login").hidden = which !== "login";
  $("account").hidden = which !== "account";
}

function status(text) {
  $("status").textContent = text;
  $("status").hidden = text === "";
}

async function loadInvoices(me) {
  $("who").textContent = me.email;
  $("customer").textContent = String(me.customer_id);
  // No filter: the database's row-level security returns this customer's invoices only.
  const r = await call("POST", "/svc", {
    relation: "invoice",
    order_by: [["desc", "invoice_date"]],
  });
  if (r.status !== 200) {
    status(`Could not read invoices: ${r.data?.message ?? r.status}`);
    return;
  }
  const body = $("invoices").tBodies[0];
  body.replaceChildren();
  let sum = 0;
  for (const inv of r.data) {
    const tr = document.createElement("tr");
    tr.className = "invoice";
    const cells = [
      String(inv.invoice_id),
      String(inv.invoice_date).slice(0, 10),
      inv.billing_city ?? "",
      inv.billing_country ?? "",
      Number(inv.total).toFixed(2),
    ];
    cells.forEach((text, i) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (i === 4) td.className = "num";
      tr.append(td);
    });
    body.append(tr);
    sum += Number(inv.total);
  }
  $("sum").textContent = sum.toFixed(2);
  status("");
  show("account");
}

async function start() {
  const me = await call("GET", "/me");
  if (me.status === 200 && me.data && me.data.email) return loadInvoices(me.data);
  if (me.status === 404) {
    status("This server has no /login route: start it with `deno task dev`.");
    return;
  }
  status("");
  show("login");
}

$("login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("login-error").hidden = true;
  const r = await call("POST", "/login", { email: $("email").value, password: $("password").value });
  if (r.status !== 200) {
    $("login-error").textContent = r.data?.message ?? `login failed (${r.status})`;
    $("login-error").hidden = false;
    return;
  }
  await loadInvoices(r.data);
});

$("logout").addEventListener("click", async () => {
  await call("POST", "/logout", {});
  $("invoices").tBodies[0].replaceChildren();
  show("login");
});

start();
