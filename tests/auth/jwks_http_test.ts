/**
 * Tokens of an external identity provider, through real HTTP against a real PostgreSQL: a local
 * JWKS endpoint (Deno.serve on 127.0.0.1) serves RS256, ES256 and EdDSA keys generated with jose;
 * svc verifies `jwt.issuer`, `jwt.audience` and the role at `jwt.role_claim`, follows a key
 * rotation, refuses algorithm confusion, rate-limits refetches for unknown keys, starts while
 * the provider is down (503 until its keys load), and serves the keys from every worker.
 */
import assert from "node:assert/strict";
import { exportJWK, exportSPKI, generateKeyPair, type JWK, SignJWT, UnsecuredJWT } from "jose";
import { emptyDb } from "../helpers/db.ts";
import { now, startServer, type TestServer, token } from "../helpers/server.ts";
import { spawnSvc } from "../helpers/process.ts";
import { waitFor } from "../helpers/wait.ts";
import { freePort } from "../../src/db/cluster.ts";

const ISSUER = "https://idp.example/";
const AUDIENCE = "svc-api";

/** A provider: its key set (mutable) served at /jwks, with a count of fetches. */
class Provider {
  keys: JWK[] = [];
  fetches = 0;
  server: Deno.HttpServer<Deno.NetAddr> | null = null;

  serve(port = 0): string {
    this.server = Deno.serve({ hostname: "127.0.0.1", port, onListen: () => {} }, (req) => {
      if (new URL(req.url).pathname !== "/jwks") return new Response("no", { status: 404 });
      this.fetches++;
      return Response.json({ keys: this.keys });
    });
    return `http://127.0.0.1:${this.server.addr.port}/jwks`;
  }

  async stop() {
    await this.server?.shutdown();
  }
}

/** A signing key with its kid, and its public JWK. */
async function signingKey(alg: string, kid: string) {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  const jwk = { ...(await exportJWK(publicKey)), kid, alg, use: "sig" };
  return { alg, kid, privateKey, publicKey, jwk };
}
type Key = Awaited<ReturnType<typeof signingKey>>;

/** An external token: issuer and audience right, role at app_metadata.role, 10 minutes. */
function external(key: Key, claims: Record<string, unknown> = {}, header = {}) {
  const t = now();
  return new SignJWT({
    iss: ISSUER,
    aud: AUDIENCE,
    sub: "user-1",
    iat: t,
    exp: t + 600,
    role: "authenticated",
    app_metadata: { role: "member" },
    ...claims,
  }).setProtectedHeader({ alg: key.alg, kid: key.kid, ...header }).sign(key.privateKey);
}

const fixture = await Deno.readTextFile(new URL("../fixtures/bearer.sql", import.meta.url));
const uri = await emptyDb("jwks", fixture);
const rsa = await signingKey("RS256", "rsa-1");
const ec = await signingKey("ES256", "ec-1");
const ed = await signingKey("EdDSA", "ed-1");
const idp = new Provider();
idp.keys = [rsa.jwk, ec.jwk, ed.jwk];
const jwksUrl = idp.serve();
const srv = await startServer(uri, [
  `--jwt.jwks_url=${jwksUrl}`,
  `--jwt.issuer=${ISSUER}`,
  `--jwt.audience=other-api,${AUDIENCE}`,
  "--jwt.role_claim=.app_metadata.role",
]);

async function whoami(srv: TestServer, tok: string) {
  const res = await srv.post("/svc", { function: "whoami" }, { authorization: `Bearer ${tok}` });
  const body = await res.json();
  return { status: res.status, res, body, row: res.ok ? body[0] : null };
}

Deno.test("RS256, ES256 and EdDSA tokens from the JWKS run as the role at jwt.role_claim", async () => {
  for (const [key, role] of [[rsa, "member"], [ec, "editor"], [ed, "member"]] as const) {
    const tok = await external(key, { app_metadata: { role } });
    const { status, row, body, res } = await whoami(srv, tok);
    assert.equal(status, 200, `${key.alg}: ${JSON.stringify(body)}`);
    assert.equal(row.usr, role, key.alg);
    // The claims reach the database as signed (the top-level role claim is not rewritten).
    assert.equal(row.claims.role, "authenticated", key.alg);
    assert.equal(row.claims.app_metadata.role, role, key.alg);
    assert.equal(row.claims.sub, "user-1", key.alg);
    assert.equal(res.headers.get("set-cookie"), null, key.alg);
  }
});

Deno.test("a key that appears in the JWKS is accepted after a refetch (rotation)", async () => {
  const next = await signingKey("RS256", "rsa-2");
  idp.keys = [...idp.keys, next.jwk];
  const before = idp.fetches;
  const { status, row, body } = await whoami(srv, await external(next));
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(row.usr, "member");
  assert.equal(idp.fetches, before + 1, "one refetch for the unknown kid");
  // Known keys need no fetch.
  await whoami(srv, await external(next));
  await whoami(srv, await external(rsa));
  assert.equal(idp.fetches, before + 1);
});

Deno.test("unknown kids refetch the JWKS at most once per interval", async () => {
  const stranger = await signingKey("RS256", "unknown");
  const before = idp.fetches;
  for (let i = 0; i < 5; i++) {
    const tok = await external(stranger, {}, { kid: `unknown-${i}` });
    const { status, body } = await whoami(srv, tok);
    assert.equal(status, 401, JSON.stringify(body));
    assert.equal(body.code, "AUTH_TOKEN_INVALID");
  }
  assert.ok(idp.fetches - before <= 1, `${idp.fetches - before} fetches for 5 unknown kids`);
});

Deno.test("wrong issuer, audience, key, claims and algorithm confusion are refused (401)", async () => {
  const t = now();
  const impostor = await signingKey("RS256", rsa.kid); // same kid, another key
  const spki = await exportSPKI(rsa.publicKey);
  const hmac = (secret: string) =>
    new SignJWT({ iss: ISSUER, aud: AUDIENCE, iat: t, exp: t + 600, role: "member" })
      .setProtectedHeader({ alg: "HS256", kid: rsa.kid })
      .sign(new TextEncoder().encode(secret));
  const cases: Record<string, string> = {
    "wrong issuer": await external(rsa, { iss: "https://evil.example/" }),
    "no issuer": await external(rsa, { iss: undefined }),
    "wrong audience": await external(rsa, { aud: "someone-else" }),
    "no audience": await external(rsa, { aud: undefined }),
    "wrong key": await external(impostor),
    "expired": await external(ec, { iat: t - 7200, exp: t - 3600 }),
    "no exp": await external(ec, { exp: undefined }),
    "not yet valid": await external(ec, { nbf: t + 3600 }),
    "no role at the claim path": await external(rsa, { app_metadata: {} }),
    "a non-string role": await external(rsa, { app_metadata: { role: ["member"] } }),
    "HS256 keyed with the RSA public key PEM": await hmac(spki),
    "HS256 keyed with the RSA public JWK": await hmac(JSON.stringify(rsa.jwk)),
    "HS256 keyed with the JWK's n": await hmac(rsa.jwk.n!),
    "alg none": new UnsecuredJWT({ iss: ISSUER, aud: AUDIENCE, iat: t, exp: t + 600 }).encode(),
    "an RS256 header on an ES256 signature": (await external(ec)).replace(
      /^[^.]+/,
      btoa(JSON.stringify({ alg: "RS256", kid: ec.kid })).replace(/=+$/, ""),
    ),
  };
  for (const [what, tok] of Object.entries(cases)) {
    const { status, body, res } = await whoami(srv, tok);
    assert.equal(status, 401, `${what}: ${JSON.stringify(body)}`);
    assert.equal(body.code, "AUTH_TOKEN_INVALID", what);
    assert.equal(res.headers.get("www-authenticate"), 'Bearer error="invalid_token"', what);
  }
  // svc's own HS tokens still work beside the JWKS (role claim `role`, no issuer/audience).
  const own = await token({ role: "editor", iat: t, exp: t + 600 });
  const { row } = await whoami(srv, own);
  assert.equal(row.usr, "editor");
});

Deno.test("a JWKS token's unknown role is 401 AUTH_ROLE_INVALID", async () => {
  const { status, body } = await whoami(
    srv,
    await external(rsa, { app_metadata: { role: "nobody" } }),
  );
  assert.equal(status, 401);
  assert.equal(body.code, "AUTH_ROLE_INVALID");
});

Deno.test("svc starts while the JWKS is down: 503 until the keys load, then accepted", async () => {
  const port = freePort();
  const late = new Provider();
  late.keys = [rsa.jwk];
  const other = await startServer(uri, [
    `--jwt.jwks_url=http://127.0.0.1:${port}/jwks`,
    "--jwt.role_claim=app_metadata.role",
  ]);
  try {
    const tok = await external(rsa);
    const down = await whoami(other, tok);
    assert.equal(down.status, 503, JSON.stringify(down.body));
    assert.equal(down.body.code, "AUTH_JWKS_UNAVAILABLE");
    assert.ok(down.res.headers.get("retry-after"));
    // svc's own sessions and anonymous requests are served meanwhile.
    const t = now();
    assert.equal(
      (await whoami(other, await token({ role: "member", iat: t, exp: t + 60 }))).row.usr,
      "member",
    );
    const anon = await other.post("/svc", { function: "whoami" });
    assert.equal((await anon.json())[0].usr, "~anonymous");
    late.serve(port);
    const up = await waitFor(async () => {
      const r = await whoami(other, tok);
      return r.status === 200 ? r : null;
    }, { timeout: 30_000, interval: 250, what: "the JWKS to load" });
    assert.equal(up.row.usr, "member");
  } finally {
    await other.stop();
    await late.stop();
  }
});

Deno.test("with http.workers=2 every worker verifies JWKS tokens", async () => {
  const svc = await spawnSvc([
    `--pg.uri=${uri}`,
    "--http.workers=2",
    "--pg.pool_size=4",
    "--pg.query.wellknown_path=/nonexistent",
    `--jwt.jwks_url=${jwksUrl}`,
    "--jwt.role_claim=.app_metadata.role",
  ]);
  try {
    await svc.waitHealthy();
    const tok = await external(ec, { app_metadata: { role: "editor" } });
    const workers = new Set<number>();
    for (let i = 0; i < 40 && workers.size < 2; i++) {
      // A fresh connection each time: the kernel spreads them over the workers.
      const client = Deno.createHttpClient({});
      try {
        const r = await fetch(`${svc.url}/svc?function=whoami`, {
          client,
          headers: { authorization: `Bearer ${tok}` },
        });
        const body = await r.text();
        assert.equal(r.status, 200, body);
        assert.equal(JSON.parse(body)[0].usr, "editor");
      } finally {
        client.close();
      }
      for (const line of svc.output().split("\n")) {
        if (!line.startsWith("{")) continue;
        const rec = JSON.parse(line) as { properties?: { path?: string; worker?: number } };
        if (rec.properties?.path === "/svc" && typeof rec.properties.worker === "number") {
          workers.add(rec.properties.worker);
        }
      }
    }
    assert.deepEqual([...workers].sort(), [0, 1], "both workers answered with the JWKS");
  } finally {
    await svc.stop();
  }
});

Deno.test("a key the provider revoked is refused after the next reload", async () => {
  // ed's key was in the key set svc loaded at startup.
  const doomed = ed;
  const tok = await external(doomed, { app_metadata: { role: "editor" } });
  const first = await whoami(srv, tok);
  assert.equal(first.status, 200, JSON.stringify(first.body));
  assert.equal(first.row.usr, "editor");
  // The provider revokes the key; svc's key set is fresh (well under its maximum age), so only a
  // reload makes svc fetch it again.
  idp.keys = idp.keys.filter((k) => k.kid !== doomed.kid);
  const before = idp.fetches;
  const still = await whoami(srv, tok);
  assert.equal(still.status, 200, "cached keys until something refetches them");
  assert.equal(idp.fetches, before);
  assert.equal(await srv.server.runtime.reload("signal"), true);
  await waitFor(() => idp.fetches > before, { what: "a refetch after the reload" });
  await waitFor(async () => (await whoami(srv, tok)).status === 401, {
    what: "the revoked key refused",
  });
  const after = await whoami(srv, tok);
  assert.equal(after.body.code, "AUTH_TOKEN_INVALID");
  // Keys still served keep working.
  assert.equal((await whoami(srv, await external(rsa))).status, 200);
});

Deno.test("stop the servers", async () => {
  await srv.stop();
  await idp.stop();
});
