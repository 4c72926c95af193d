/**
 * What svc loads at start-up (docs/performance.md "Memory"): the code of subsystems that are not
 * configured or not used yet — Prometheus exposition (prom-client), page templates (Eta),
 * multipart parsing, OIDC and SAML, YAML — is not loaded, so it costs no memory. The scripts a
 * running svc has loaded are read through its V8 inspector (`Debugger.scriptParsed`); scraping
 * /svc/metrics then shows prom-client loaded, so the listing is seen to work.
 */
import assert from "node:assert/strict";
import { freePort } from "../../src/db/cluster.ts";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { spawnSvc } from "../helpers/process.ts";

/** The URLs of every script the process's V8 has parsed so far. */
async function loadedScripts(inspectPort: number): Promise<string[]> {
  const targets = await (await fetch(`http://127.0.0.1:${inspectPort}/json/list`)).json() as {
    webSocketDebuggerUrl: string;
  }[];
  const ws = new WebSocket(targets[0].webSocketDebuggerUrl);
  const urls: string[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      ws.onerror = () => reject(new Error("inspector connection failed"));
      ws.onopen = () => ws.send(JSON.stringify({ id: 1, method: "Debugger.enable" }));
      ws.onmessage = (e) => {
        const m = JSON.parse(e.data as string);
        if (m.method === "Debugger.scriptParsed") urls.push(m.params.url);
        // Every scriptParsed of the scripts already loaded comes before the answer.
        if (m.id === 1) resolve();
      };
    });
  } finally {
    ws.close();
    await new Promise((r) => (ws.readyState === WebSocket.CLOSED ? r(null) : (ws.onclose = r)));
  }
  return urls;
}

/** Loaded scripts whose URL contains one of `parts`. */
function matching(urls: string[], parts: string[]): string[] {
  return urls.filter((u) => parts.some((p) => u.includes(p)));
}

/** Code a svc without SSO, templates or uploads must not load; prom-client until a scrape. */
const LAZY = [
  "/prom-client/",
  "/eta/",
  "/@fastify/busboy/",
  "/openid-client/",
  "/samlify/",
  "/xml-crypto/",
  "/@peculiar/x509/",
  "/yaml/",
  "/src/observe/metrics_prom.ts",
  "/src/http/templates.ts",
  "/src/http/multipart.ts",
  "/src/sso/oidc.ts",
  "/src/sso/saml.ts",
];

Deno.test("svc loads no code of subsystems it does not use yet", async () => {
  const uri = await emptyDb("lazy_load");
  const inspect = freePort();
  const svc = await spawnSvc(
    [`--pg.uri=${uri}`, "--http.workers=1", "--http.metrics.enable=true"],
    {},
    [`--inspect=127.0.0.1:${inspect}`],
  );
  try {
    await svc.waitHealthy(30_000);
    const read = await fetch(`${svc.url}/svc`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sql: "select 1 as x" }),
    });
    await read.body?.cancel();
    const before = await loadedScripts(inspect);
    assert.ok(matching(before, ["/src/http/server.ts"]).length === 1, "the listing sees svc");
    assert.deepEqual(matching(before, LAZY), []);
    // The first scrape loads the exposition code.
    const scrape = await fetch(`${svc.url}/svc/metrics`);
    assert.equal(scrape.status, 200);
    await scrape.body?.cancel();
    const after = await loadedScripts(inspect);
    assert.ok(matching(after, ["/prom-client/"]).length > 0, "prom-client after a scrape");
    assert.ok(matching(after, ["/src/observe/metrics_prom.ts"]).length === 1);
  } finally {
    await svc.stop();
    await stopDb();
  }
});
