/**
 * OpenID Connect login end to end against a real provider (oidc-provider on loopback, confidential
 * client, PKCE required), driven over HTTP: a provider down at startup, a full login ending with
 * the session cookie, the callback's payload, and each attack refused with its SSO_* code and no
 * session.
 */
import assert from "node:assert/strict";
import { decodeJwt, generateKeyPair, SignJWT } from "jose";
import { sqlClient } from "../helpers/sql.ts";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";
import { driveIdp, freePort, Jar, type OidcIdp, startOidcIdp } from "./oidc_idp.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/sso.sql", import.meta.url));
const uri = await emptyDb("sso", fixture);
const svcPort = freePort();
const idpPort = freePort();
const origin = `http://127.0.0.1:${svcPort}`;
const entries = ["main", "info", "restricted", "show", "tpl"];
const entryFlags = (name: string) => [
  `--openid.${name}.issuer=http://127.0.0.1:${idpPort}`,
  `--openid.${name}.client_id=svc-test`,
];
const secrets = await Deno.makeTempDir();
await Deno.writeTextFile(
  `${secrets}/openid-main.secret`,
  "svc-test-secret-0123456789-abcdefghij\n",
);
const srv = await startServer(uri, [
  `--http.port=${svcPort}`,
  `--http.public_host=127.0.0.1:${svcPort}`,
  "--http.metrics.enable=true",
  "--http.functions.sso_callback=public.sso_login",
  "--http.functions.allowed_auth=^public\\.sso_login$",
  ...entries.flatMap(entryFlags),
  // main reads its secret from <secrets.dir>/openid-main.secret; the others from config.
  ...entries.filter((e) => e !== "main").map((e) =>
    `--openid.${e}.client_secret=svc-test-secret-0123456789-abcdefghij`
  ),
  "--openid.info.fetch_userinfo=true",
  "--openid.info.scopes=openid,email",
  "--openid.restricted.callback_function=public.sso_other",
  "--openid.show.callback_function=public.sso_show",
  "--openid.tpl.callback_function=public.sso_tpl",
  `--secrets.dir=${secrets}`,
  // Misconfigured: no client id in config or in <secrets.dir>/openid-nocreds.id.
  `--openid.nocreds.issuer=http://127.0.0.1:${idpPort}`,
  "--logging.level=warn",
  "--logging.handler=json",
]);
let idp: OidcIdp;
const sql = sqlClient(uri);
/** The callback's log: who it ran as and the payload it got. */
const ssoLog = async () =>
  (await sql`select ran_as, payload as p from sso_log order by id`) as unknown as {
    ran_as: string;
    // deno-lint-ignore no-explicit-any
    p: any;
  }[];

const test = (name: string, fn: () => Promise<void>) => Deno.test({ name, fn });

const callbackOf = (entry: string) => `${origin}/auth/oidc/${entry}/callback`;

/** Starts a login at svc and drives the provider; returns the callback URL (unvisited). */
async function toCallback(
  jar: Jar,
  entry = "main",
  email = "alice@example.com",
  query = "?next=/after&a.b=1",
  editAuthUrl?: (u: URL) => void,
): Promise<string> {
  const res = await jar.fetch(`${origin}/auth/oidc/${entry}/login${query}`);
  assert.equal(res.status, 303, await res.text());
  const setCookie = res.headers.getSetCookie().join("\n");
  assert.match(setCookie, /svc_sso=.*Path=\/auth\/; HttpOnly; Secure; SameSite=Lax/);
  const authUrl = new URL(res.headers.get("location")!);
  assert.equal(authUrl.origin, `http://127.0.0.1:${idpPort}`);
  assert.equal(authUrl.searchParams.get("code_challenge_method"), "S256");
  editAuthUrl?.(authUrl);
  return await driveIdp(jar, authUrl.href, email, callbackOf(entry));
}

/** The session token a response sets, or null. */
function sessionSet(res: Response): string | null {
  for (const c of res.headers.getSetCookie()) {
    const m = /^accesstoken=([^;]*)/.exec(c);
    if (m && m[1] !== "") return m[1];
  }
  return null;
}

async function refused(res: Response, status: number, code: string) {
  const body = await res.text();
  assert.equal(res.status, status, body);
  assert.equal(res.headers.get("x-svc-errorcode"), code, body);
  assert.equal(JSON.parse(body).code, code);
  assert.equal(sessionSet(res), null, "no session may be set");
}

test("provider down at startup: 503 SSO_NOT_READY, then a working login without restart", async () => {
  const jar = new Jar();
  const down = await jar.fetch(`${origin}/auth/oidc/main/login`);
  await refused(down, 503, "SSO_NOT_READY");
  const cb = await jar.fetch(`${origin}/auth/oidc/main/callback?code=x&state=y`);
  await refused(cb, 503, "SSO_NOT_READY");
  idp = await startOidcIdp(entries.map(callbackOf), idpPort);
  const deadline = Date.now() + 15_000;
  let status = 0;
  while (Date.now() < deadline) {
    const res = await jar.fetch(`${origin}/auth/oidc/main/login`);
    await res.body?.cancel();
    status = res.status;
    if (status === 303) break;
    assert.equal(status, 503);
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.equal(status, 303, "the entry becomes ready once the provider answers");
});

test("full login: callback runs as anonymous with the documented payload, session cookie set", async () => {
  await sql`truncate sso_log`;
  const jar = new Jar();
  const cb = await toCallback(jar);
  const res = await jar.fetch(cb);
  assert.equal(res.status, 303, await res.text());
  assert.equal(res.headers.get("location"), "/after");
  const token = sessionSet(res);
  assert.ok(token, "session cookie set");
  const claims = decodeJwt(token);
  assert.equal(claims.role, "member");
  assert.equal(claims.email, "alice@example.com");
  assert.ok(claims.auth_time && claims.exp);
  assert.match(res.headers.getSetCookie().join("\n"), /svc_sso=; Max-Age=0; Path=\/auth\//);
  const log = await ssoLog();
  assert.equal(log.length, 1);
  assert.equal(log[0].ran_as, "postgres/~anonymous");
  const p = log[0].p;
  assert.equal(p.jwt, null);
  assert.deepEqual(p.state, { next: "/after", a: { b: "1" } });
  assert.equal(p.identity.protocol, "oidc");
  assert.equal(p.identity.name, "main");
  assert.equal(p.identity.claims.email, "alice@example.com");
  assert.equal(p.identity.claims.iss, idp.issuer);
  assert.equal(p.identity.claims.aud, "svc-test");
  assert.equal(typeof p.identity.access_token, "string");

  // A second login from the logged-in browser: the callback sees its session and runs as its role.
  await sql`truncate sso_log`;
  const jar2 = new Jar(); // a fresh provider session, so the provider asks who logs in
  jar2.cookies.set("accesstoken", token);
  const again = await jar2.fetch(await toCallback(jar2, "main", "bob@example.com", ""));
  assert.equal(again.status, 303, await again.text());
  assert.equal(again.headers.get("location"), "/");
  assert.equal(decodeJwt(sessionSet(again)!).email, "bob@example.com");
  const [row] = await ssoLog();
  assert.equal(row.ran_as, "postgres/member");
  assert.equal(row.p.jwt.email, "alice@example.com");
  assert.equal(row.p.jwt.role, "member");
  assert.equal(row.p.state, null);
});

test("attack: state mismatch → 400 SSO_BAD_STATE", async () => {
  const jar = new Jar();
  const cb = new URL(await toCallback(jar));
  cb.searchParams.set("state", "forged" + cb.searchParams.get("state"));
  await refused(await jar.fetch(cb.href), 400, "SSO_BAD_STATE");
});

test("attack: missing state cookie → 400 SSO_BAD_STATE", async () => {
  const jar = new Jar();
  const cb = await toCallback(jar);
  jar.cookies.delete("svc_sso");
  await refused(await jar.fetch(cb), 400, "SSO_BAD_STATE");
});

test("attack: nonce mismatch (authorization request tampered) → 400 SSO_BAD_NONCE", async () => {
  const jar = new Jar();
  const cb = await toCallback(jar, "main", "alice@example.com", "", (u) => {
    u.searchParams.set("nonce", "attacker-chosen-nonce");
  });
  await refused(await jar.fetch(cb), 400, "SSO_BAD_NONCE");
});

test("attack: code replayed → SSO_BAD_STATE (same state) and SSO_TOKEN_EXCHANGE_FAILED", async () => {
  const jar = new Jar();
  const cb = await toCallback(jar);
  const stateCookie = jar.cookies.get("svc_sso")!;
  const ok = await jar.fetch(cb);
  assert.equal(ok.status, 303);
  await ok.body?.cancel();
  // The very same callback again, state cookie put back: the state is consumed.
  jar.cookies.set("svc_sso", stateCookie);
  jar.cookies.delete("accesstoken");
  await refused(await jar.fetch(cb), 400, "SSO_BAD_STATE");
  // The used code with a fresh login's state: the provider refuses the code.
  const fresh = new URL(await toCallback(new Jar(), "main"));
  const jar2 = new Jar();
  const res = await jar2.fetch(`${origin}/auth/oidc/main/login`);
  await res.body?.cancel();
  const state = new URL(res.headers.get("location")!).searchParams.get("state")!;
  const replay = new URL(cb);
  replay.searchParams.set("state", state);
  await refused(await jar2.fetch(replay.href), 502, "SSO_TOKEN_EXCHANGE_FAILED");
  assert.ok(fresh.searchParams.get("code"));
});

test("attack: ID token from another issuer → 502 SSO_INVALID_ID_TOKEN", async () => {
  idp.tamper = async (body) => {
    body.id_token = await idp.forge(body.id_token as string, (c) => {
      c.iss = "http://127.0.0.1:1/another-issuer";
    });
  };
  try {
    const jar = new Jar();
    await refused(await jar.fetch(await toCallback(jar)), 502, "SSO_INVALID_ID_TOKEN");
  } finally {
    idp.tamper = null;
  }
});

test("a refusal is logged with the entry and the reason, never with the token", async () => {
  const lines: string[] = [];
  const original = { ...console };
  for (const m of ["log", "info", "warn", "error", "debug"] as const) {
    console[m] = (...a: unknown[]) => lines.push(a.map(String).join(" "));
  }
  let forged = "";
  idp.tamper = async (body) => {
    forged = body.id_token = await idp.forge(body.id_token as string, (c) => {
      c.iss = "http://127.0.0.1:1/another-issuer";
    });
  };
  try {
    const jar = new Jar();
    await refused(await jar.fetch(await toCallback(jar)), 502, "SSO_INVALID_ID_TOKEN");
  } finally {
    idp.tamper = null;
    Object.assign(console, original);
  }
  const refusal = lines.find((l) => l.includes("login refused"));
  assert.ok(refusal, lines.join("\n"));
  assert.match(refusal, /openid\.main/);
  assert.match(refusal, /SSO_INVALID_ID_TOKEN/);
  assert.match(refusal, /iss/);
  const all = lines.join("\n");
  assert.ok(forged && !all.includes(forged) && !all.includes(forged.split(".")[2]));
});

test("attack: expired ID token → 502 SSO_INVALID_ID_TOKEN", async () => {
  idp.tamper = async (body) => {
    body.id_token = await idp.forge(body.id_token as string, (c) => {
      const now = Math.floor(Date.now() / 1000);
      c.iat = now - 7200;
      c.exp = now - 3600;
    });
  };
  try {
    const jar = new Jar();
    await refused(await jar.fetch(await toCallback(jar)), 502, "SSO_INVALID_ID_TOKEN");
  } finally {
    idp.tamper = null;
  }
});

test("attack: ID token issued in the future (iat beyond the clock skew) → 502 SSO_INVALID_ID_TOKEN", async () => {
  for (const [ahead, status] of [[3600, 502], [10, 303]] as const) {
    idp.tamper = async (body) => {
      body.id_token = await idp.forge(body.id_token as string, (c) => {
        const now = Math.floor(Date.now() / 1000);
        c.iat = now + ahead;
        c.exp = now + ahead + 600;
      });
    };
    try {
      const jar = new Jar();
      const res = await jar.fetch(await toCallback(jar));
      if (status === 502) await refused(res, 502, "SSO_INVALID_ID_TOKEN");
      else {assert.equal(
          res.status,
          303,
          `${ahead} s ahead is within the skew: ${await res.text()}`,
        );}
    } finally {
      idp.tamper = null;
    }
  }
});

test("attack: ID token for another audience or signed by another key → 502 SSO_INVALID_ID_TOKEN", async () => {
  const { privateKey } = await generateKeyPair("RS256");
  for (
    const forge of [
      (t: string) => idp.forge(t, (c) => (c.aud = "another-client")),
      (t: string) =>
        new SignJWT(decodeJwt(t)).setProtectedHeader({ alg: "RS256", kid: "test-key" }).sign(
          privateKey,
        ),
    ]
  ) {
    idp.tamper = async (body) => {
      body.id_token = await forge(body.id_token as string);
    };
    try {
      const jar = new Jar();
      await refused(await jar.fetch(await toCallback(jar)), 502, "SSO_INVALID_ID_TOKEN");
    } finally {
      idp.tamper = null;
    }
  }
});

test("token response without id_token → 502 SSO_NO_ID_TOKEN", async () => {
  idp.tamper = (body) => {
    delete body.id_token;
  };
  try {
    const jar = new Jar();
    await refused(await jar.fetch(await toCallback(jar)), 502, "SSO_NO_ID_TOKEN");
  } finally {
    idp.tamper = null;
  }
});

test("callback without code → 400 SSO_BAD_REQUEST; provider error → 400 SSO_BAD_REQUEST", async () => {
  for (const extra of ["", "&error=access_denied"]) {
    const jar = new Jar();
    const res = await jar.fetch(`${origin}/auth/oidc/main/login`);
    await res.body?.cancel();
    const state = new URL(res.headers.get("location")!).searchParams.get("state")!;
    const cb = `${callbackOf("main")}?state=${encodeURIComponent(state)}${extra}`;
    await refused(await jar.fetch(cb), 400, "SSO_BAD_REQUEST");
  }
});

test("a malformed callback (code twice, iss missing or foreign) → 400 SSO_BAD_REQUEST, not 502", async () => {
  // Found by a black-box audit: these were 502 SSO_INVALID_ID_TOKEN, an upstream error for a
  // client's malformed request (no token is ever asked for).
  const mutations: ((u: URL) => void)[] = [
    (u) => u.searchParams.append("code", "another"),
    (u) => u.searchParams.delete("iss"),
    (u) => u.searchParams.set("iss", "http://evil.example"),
  ];
  for (const mutate of mutations) {
    const jar = new Jar();
    const cb = new URL(await toCallback(jar));
    assert.ok(cb.searchParams.has("iss"), "the provider sends iss");
    mutate(cb);
    await refused(await jar.fetch(cb.href), 400, "SSO_BAD_REQUEST");
  }
});

test("a login query nested thousands deep → 400 SSO_BAD_REQUEST, not 500", async () => {
  // Found by a hostile client: 3,000 dotted levels exhausted the stack (500 SSO_INTERNAL).
  const deep = await fetch(`${origin}/auth/oidc/main/login?${"a.".repeat(3000)}a=1`, {
    redirect: "manual",
  });
  await refused(deep, 400, "SSO_BAD_REQUEST");
  const fine = await fetch(`${origin}/auth/oidc/main/login?${"a.".repeat(40)}a=1`, {
    redirect: "manual",
  });
  await fine.body?.cancel();
  assert.equal(fine.status, 303);
});

test("SSO callbacks are not callable through /svc with a forged identity", async () => {
  // Found by a hostile client: POST /svc {"function":"sso_login", …} ran the callback on a
  // made-up identity (mapping any e-mail to its role, running its side effects).
  for (const fn of ["sso_login", "sso_other", "sso_show"]) {
    const res = await srv.post("/svc", {
      function: fn,
      arguments: {
        p: [{ identity: { protocol: "oidc", claims: { email: "alice@example.com" } } }],
      },
    });
    const text = await res.text();
    assert.equal(res.status, 404, `${fn}: ${text}`);
    assert.equal(JSON.parse(text).code, "QUERY_UNKNOWN_RELATION");
  }
});

test("fetch_userinfo merges userinfo claims; a failing userinfo → 502 SSO_USERINFO_FAILED", async () => {
  await sql`truncate sso_log`;
  const jar = new Jar();
  const res = await jar.fetch(await toCallback(jar, "info"));
  assert.equal(res.status, 303, await res.text());
  assert.ok(sessionSet(res));
  const claims = (await ssoLog())[0].p.identity.claims;
  assert.equal(claims.email, "alice@example.com");
  assert.equal(claims.email_verified, true);
  idp.breakUserinfo = true;
  try {
    const jar2 = new Jar();
    await refused(await jar2.fetch(await toCallback(jar2, "info")), 502, "SSO_USERINFO_FAILED");
  } finally {
    idp.breakUserinfo = false;
  }
});

test("the callback rejects an unknown user with RS403; allowed_auth gates jwt", async () => {
  const jar = new Jar();
  await refused(
    await jar.fetch(await toCallback(jar, "main", "mallory@example.com")),
    403,
    "RS403",
  );
  const jar2 = new Jar();
  await refused(
    await jar2.fetch(await toCallback(jar2, "restricted")),
    403,
    "AUTH_JWT_NOT_ALLOWED",
  );
});

test("a callback answering status, headers and content", async () => {
  const jar = new Jar();
  const res = await jar.fetch(await toCallback(jar, "show"));
  assert.equal(res.status, 202);
  assert.equal(res.headers.get("x-sso"), "show");
  assert.equal(res.headers.get("content-type"), "application/json");
  assert.equal(await res.json(), "alice@example.com");
  assert.equal(sessionSet(res), null);
});

test("a template answer without the template engine wired is 500 INTERNAL", async () => {
  const jar = new Jar();
  await refused(await jar.fetch(await toCallback(jar, "tpl")), 500, "INTERNAL");
});

test("attack: forged or foreign state cookie → 400 SSO_BAD_STATE", async () => {
  const jar = new Jar();
  const cb = await toCallback(jar);
  const [h, p, sig] = jar.cookies.get("svc_sso")!.split(".");
  const payload = JSON.parse(new TextDecoder().decode(
    Uint8Array.from(atob(p.replaceAll("-", "+").replaceAll("_", "/")), (c) => c.charCodeAt(0)),
  ));
  payload.nonce = "attacker";
  const forged = btoa(JSON.stringify(payload)).replaceAll("+", "-").replaceAll("/", "_")
    .replaceAll("=", "");
  jar.cookies.set("svc_sso", `${h}.${forged}.${sig}`);
  await refused(await jar.fetch(cb), 400, "SSO_BAD_STATE");
  // A state cookie of another entry.
  const jar2 = new Jar();
  const cb2 = await toCallback(jar2, "show");
  const other = new Jar();
  const res = await other.fetch(`${origin}/auth/oidc/main/login`);
  await res.body?.cancel();
  jar2.cookies.set("svc_sso", other.cookies.get("svc_sso")!);
  await refused(await jar2.fetch(cb2), 400, "SSO_BAD_STATE");
});

test("a misconfigured entry stays 503 SSO_NOT_READY (reason logged), others work", async () => {
  const res = await fetch(`${origin}/auth/oidc/nocreds/login`);
  await refused(res, 503, "SSO_NOT_READY");
});

test("unknown entries and actions are 404, wrong methods 405", async () => {
  for (const path of ["/auth/oidc/nope/login", "/auth/oidc/main/other", "/auth/x"]) {
    const res = await fetch(origin + path);
    assert.equal(res.status, 404, path);
    assert.equal(res.headers.get("x-svc-errorcode"), "HTTP_NOT_FOUND");
    await res.body?.cancel();
  }
  const res = await fetch(`${origin}/auth/oidc/main/login`, { method: "POST" });
  assert.equal(res.status, 405);
  assert.equal(res.headers.get("allow"), "GET, HEAD");
  await res.body?.cancel();
});

test("svc_sso_logins_total counts logins by entry and outcome", async () => {
  const text = await (await fetch(`${origin}/svc/metrics`)).text();
  const count = (outcome: string, provider = "openid.main") => {
    const line = text.split("\n").find((l) =>
      l.startsWith("svc_sso_logins_total{") && l.includes(`provider="${provider}"`) &&
      l.includes(`outcome="${outcome}"`)
    );
    return line ? Number(line.split(" ").pop()) : 0;
  };
  // The tests above logged in, and were refused, through openid.main.
  assert.ok(count("ok") >= 1, text);
  assert.ok(count("SSO_BAD_STATE") >= 1, text);
  assert.ok(count("SSO_INVALID_ID_TOKEN") >= 1, text);
  assert.ok(count("callback_failed") >= 1, text); // the RS403 of an unknown user
});

test("cleanup", async () => {
  await srv.stop();
  await sql.end();
  await idp?.stop();
  await stopDb();
  await Deno.remove(secrets, { recursive: true });
});
