/**
 * Eta templates (src/http/templates.ts) through a real HTTP server started here (Deno.serve on
 * 127.0.0.1:0 answering with a route's `resp.template` the way declared routes do): the
 * page's inline script carries the nonce of its Content-Security-Policy header, HTML-special
 * characters are escaped, names cannot escape the directory, a missing template or a render
 * error is 500 INTERNAL (template name in the body only in dev mode), and reload() re-reads.
 */
import assert from "node:assert/strict";
import { Templates } from "../../src/http/templates.ts";
import { Sessions } from "../../src/auth/session.ts";
import { cspFor } from "../../src/http/csp.ts";
import { buildResponse } from "../../src/http/routes/response.ts";
import { errorResponse } from "../../src/http/error_response.ts";

const root = await Deno.makeTempDir({ prefix: "svc-tpl-" });
const dir = `${root}/templates`;
await Deno.mkdir(`${dir}/parts`, { recursive: true });
await Deno.writeTextFile(
  `${dir}/page.eta`,
  `<!doctype html><title><%= it.title %></title>
<style nonce="<%= it.nonce %>">body{margin:0}</style>
<h1><%= it.title %></h1>
<ul><% it.items.forEach(function (i) { %><li><%= i %></li><% }) %></ul>
<%~ include("parts/footer", { year: it.year }) %>
<script nonce="<%= it.nonce %>">document.body.dataset.ready = "1"</script>
`,
);
await Deno.writeTextFile(`${dir}/parts/footer.eta`, "<footer>© <%= it.year %></footer>");
await Deno.writeTextFile(`${dir}/broken.eta`, "<%= it.nothing.deeper %>");
await Deno.writeTextFile(`${dir}/version.eta`, "v1");
await Deno.writeTextFile(`${root}/outside.eta`, "SECRET outside");
await Deno.symlink(`${root}/outside.eta`, `${dir}/link.eta`);
await Deno.writeTextFile(`${dir}/.hidden.eta`, "SECRET hidden");

const csp = { default_src: "'self'" };
const sessions = new Sessions({
  secret: new TextEncoder().encode("templates-test-secret-templates-test"),
  algorithm: "HS256",
  maxAge: 600,
  renewAfter: 0.5,
  maxSessionAge: 3600,
  cookieName: "accesstoken",
  sameSite: "Lax",
});
function serve(templates: Templates, dev: boolean) {
  return Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    const name = url.searchParams.get("t") ?? "page";
    try {
      const content = JSON.parse(url.searchParams.get("it") ?? "{}");
      const override = url.searchParams.get("csp");
      const resp = override === null ? { template: name } : { template: name, csp: override };
      const { response } = await buildResponse(resp, content, {
        sessions,
        sessionCookieName: "accesstoken",
        cookiesMaxAge: 100,
        authId: null,
        allowedAuth: null,
        hooks: {
          render: (t, it, nonce) => templates.render(t, it, nonce),
          csp: (nonce, o) => cspFor(csp, nonce, o),
        },
      });
      return response;
    } catch (e) {
      return errorResponse(e, { dev, anonymous: true });
    }
  });
}
const tpl = new Templates(dir, false);
const prod = serve(tpl, false);
const dev = serve(new Templates(dir, true), true);
const url = (s: Deno.HttpServer<Deno.NetAddr>, t: string, it: unknown = {}) =>
  `http://127.0.0.1:${s.addr.port}/?t=${encodeURIComponent(t)}&it=${
    encodeURIComponent(JSON.stringify(it))
  }`;

Deno.test("a page's inline script and style carry the nonce of its CSP header; text is escaped", async () => {
  const title = `<script>alert("x")</script> & 'q'`;
  const r = await fetch(url(prod, "page", { title, items: ["<b>", "a&b"], year: 2026 }));
  assert.equal(r.status, 200);
  const header = r.headers.get("content-security-policy")!;
  const nonce = /script-src 'self' 'nonce-([^']+)'/.exec(header)![1];
  assert.match(header, new RegExp(`style-src 'self' 'nonce-${nonce.replace(/[+/]/g, "\\$&")}'`));
  const html = await r.text();
  assert.ok(html.includes(`<script nonce="${nonce}">`), html);
  assert.ok(html.includes(`<style nonce="${nonce}">`), html);
  assert.ok(
    html.includes("<h1>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;</h1>"),
    html,
  );
  assert.ok(html.includes("<li>&lt;b&gt;</li><li>a&amp;b</li>"), html);
  assert.ok(html.includes("<footer>© 2026</footer>"), html);
  assert.equal((html.match(/<script/g) ?? []).length, 1); // the title's script stayed text
  // A fresh nonce per response; `nonce` in the content is overwritten.
  const r2 = await fetch(url(prod, "page", { title: "t", items: [], year: 1, nonce: "evil" }));
  const h2 = r2.headers.get("content-security-policy")!;
  const n2 = /'nonce-([^']+)'/.exec(h2)![1];
  assert.notEqual(n2, nonce);
  const html2 = await r2.text();
  assert.ok(html2.includes(`nonce="${n2}"`) && !html2.includes("evil"));
});

Deno.test("a response's own CSP (resp.csp) replaces the policy and still gets the nonce", async () => {
  const r = await fetch(
    url(prod, "page", { title: "t", items: [], year: 1 }) + "&csp=" +
      encodeURIComponent("default-src 'none'; script-src https://cdn.example"),
  );
  const header = r.headers.get("content-security-policy")!;
  const m =
    /^default-src 'none'; script-src https:\/\/cdn\.example 'nonce-([^']+)'; style-src 'nonce-([^']+)'$/
      .exec(header);
  assert.ok(m, header);
  assert.equal(m[1], m[2]);
  assert.ok((await r.text()).includes(`<script nonce="${m[1]}">`));
});

Deno.test("names cannot escape the directory; missing or broken → 500 INTERNAL", async () => {
  for (
    const t of [
      "../outside",
      "parts/../../outside",
      "/etc/passwd",
      "link",
      ".hidden",
      "parts\\..\\..\\outside",
      "page\0",
      "missing",
      "broken",
    ]
  ) {
    const r = await fetch(url(prod, t, { title: "t", items: [] }));
    assert.equal(r.status, 500, t);
    const body = await r.json();
    assert.equal(body.code, "INTERNAL");
    assert.equal(body.message, "internal error"); // nothing of the name or reason outside dev
    assert.doesNotMatch(JSON.stringify(body), /SECRET/);
  }
  const d = await fetch(url(dev, "missing"));
  assert.equal(d.status, 500);
  const db = await d.json();
  assert.equal(db.details.template, "missing");
  assert.match(db.message, /missing/);
  const b = await fetch(url(dev, "broken"));
  assert.match((await b.json()).details.reason, /deeper|undefined/);
});

Deno.test("templates are cached until reload()", async () => {
  const v = async () => await (await fetch(url(prod, "version"))).text();
  assert.equal(await v(), "v1");
  await Deno.writeTextFile(`${dir}/version.eta`, "v2");
  assert.equal(await v(), "v1");
  tpl.reload();
  assert.equal(await v(), "v2");
});

Deno.test({
  name: "teardown",
  async fn() {
    await prod.shutdown();
    await dev.shutdown();
    await Deno.remove(root, { recursive: true });
  },
});
