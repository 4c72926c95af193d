import assert from "node:assert/strict";
import { base64url, SignJWT } from "jose";
import {
  cacheEntryBytes,
  type Claims,
  MAX_TOKEN_LENGTH,
  type SessionConfig,
  Sessions,
} from "../../src/auth/session.ts";

const SECRET = new TextEncoder().encode("test-secret-0123456789-abcdefghijklmnopqrstuvwxyz");
const NOW = 1_700_000_000;
const MAX_AGE = 1800;
const MAX_SESSION_AGE = 604800;

function config(overrides: Partial<SessionConfig> = {}): SessionConfig {
  return {
    secret: SECRET,
    algorithm: "HS256",
    maxAge: MAX_AGE,
    renewAfter: 0.5,
    maxSessionAge: MAX_SESSION_AGE,
    cookieName: "accesstoken",
    sameSite: "Lax",
    ...overrides,
  };
}

/** Signs `payload` with jose directly, bypassing Sessions.mint. */
async function sign(
  payload: Record<string, unknown>,
  alg: "HS256" | "HS384" | "HS512" = "HS256",
  key: Uint8Array = SECRET,
): Promise<string> {
  return await new SignJWT(payload).setProtectedHeader({ alg, typ: "JWT" }).sign(key);
}

function b64json(value: unknown): string {
  return base64url.encode(JSON.stringify(value));
}

function validPayload(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { role: "web_user", iat: NOW - 10, exp: NOW + 600, auth_time: NOW - 10, ...extra };
}

/** Parses a Set-Cookie value into its name/value and attribute list. */
function parseSetCookie(header: string): { name: string; value: string; attrs: string[] } {
  const [pair, ...attrs] = header.split(";").map((s) => s.trim());
  const eq = pair.indexOf("=");
  return { name: pair.slice(0, eq), value: pair.slice(eq + 1), attrs };
}

function assertCookieAttrs(header: string, maxAge: number, sameSite = "Lax"): void {
  const { attrs } = parseSetCookie(header);
  assert.deepEqual(attrs, [
    `Max-Age=${maxAge}`,
    "Path=/",
    "HttpOnly",
    "Secure",
    `SameSite=${sameSite}`,
  ]);
}

// ---------------------------------------------------------------- verify

Deno.test("verify: accepts a valid jose-signed token", async () => {
  const sessions = new Sessions(config());
  const token = await sign(validPayload({ email: "a@b.c", org: { id: 7 } }));
  const claims = await sessions.verify(token, NOW);
  assert.ok(claims);
  assert.equal(claims.role, "web_user");
  assert.equal(claims.iat, NOW - 10);
  assert.equal(claims.exp, NOW + 600);
  assert.equal(claims.auth_time, NOW - 10);
  assert.equal(claims.email, "a@b.c");
  assert.deepEqual(claims.org, { id: 7 });
});

Deno.test("verify: accepts a minted token using the real clock", async () => {
  const sessions = new Sessions(config({ cacheSize: 0 }));
  const { token, claims } = await sessions.mint({ role: "web_user" });
  assert.deepEqual(await sessions.verify(token), claims);
});

Deno.test("verify: missing auth_time is treated as iat", async () => {
  const sessions = new Sessions(config());
  const payload = validPayload();
  delete payload.auth_time;
  const claims = await sessions.verify(await sign(payload), NOW);
  assert.ok(claims);
  assert.equal(claims.auth_time, NOW - 10);
});

Deno.test("verify: non-numeric auth_time is rejected", async () => {
  const sessions = new Sessions(config());
  for (const auth_time of ["1700000000", null]) {
    assert.equal(await sessions.verify(await sign(validPayload({ auth_time })), NOW), null);
  }
});

Deno.test("verify: tampered payload is rejected", async () => {
  const sessions = new Sessions(config());
  const token = await sign(validPayload());
  assert.ok(await sessions.verify(token, NOW));
  const [header, payload, signature] = token.split(".");
  const decoded = JSON.parse(new TextDecoder().decode(base64url.decode(payload)));
  decoded.role = "postgres";
  const tampered = [header, b64json(decoded), signature].join(".");
  assert.notEqual(tampered, token);
  assert.equal(await sessions.verify(tampered, NOW), null);
  // Flipping a signature character is rejected too.
  const badSig = signature.startsWith("A") ? "B" + signature.slice(1) : "A" + signature.slice(1);
  assert.equal(await sessions.verify([header, payload, badSig].join("."), NOW), null);
});

Deno.test("verify: token signed with another secret is rejected", async () => {
  const sessions = new Sessions(config());
  const other = new TextEncoder().encode("another-secret-0123456789-abcdefghijklmnop");
  assert.equal(await sessions.verify(await sign(validPayload(), "HS256", other), NOW), null);
});

Deno.test("verify: HS512 token is rejected when HS256 is configured", async () => {
  const token = await sign(validPayload(), "HS512");
  assert.equal(await new Sessions(config()).verify(token, NOW), null);
  // Sanity: the same token is fine for an HS512 configuration.
  assert.ok(await new Sessions(config({ algorithm: "HS512" })).verify(token, NOW));
  // And the reverse: HS256 token with HS512 configured.
  const hs256 = await sign(validPayload(), "HS256");
  assert.equal(await new Sessions(config({ algorithm: "HS512" })).verify(hs256, NOW), null);
});

Deno.test("verify: alg none token is rejected", async () => {
  const sessions = new Sessions(config());
  const payload = b64json(validPayload());
  for (const header of [{ alg: "none", typ: "JWT" }, { alg: "None" }, { alg: "NONE" }]) {
    assert.equal(await sessions.verify(`${b64json(header)}.${payload}.`, NOW), null);
  }
  // none header with a real HS256 signature attached is rejected as well.
  const [, , sig] = (await sign(validPayload())).split(".");
  assert.equal(
    await sessions.verify(`${b64json({ alg: "none", typ: "JWT" })}.${payload}.${sig}`, NOW),
    null,
  );
});

Deno.test("verify: expired token is rejected", async () => {
  const sessions = new Sessions(config());
  assert.equal(await sessions.verify(await sign(validPayload({ exp: NOW - 1 })), NOW), null);
  assert.equal(await sessions.verify(await sign(validPayload({ exp: NOW })), NOW), null);
  assert.ok(await sessions.verify(await sign(validPayload({ exp: NOW + 1 })), NOW));
});

Deno.test("verify: missing or non-numeric exp is rejected", async () => {
  const sessions = new Sessions(config());
  const payload = validPayload();
  delete payload.exp;
  assert.equal(await sessions.verify(await sign(payload), NOW), null);
  assert.equal(
    await sessions.verify(await sign(validPayload({ exp: String(NOW + 600) })), NOW),
    null,
  );
});

Deno.test("verify: missing iat or iat in the future (beyond 30 s skew) is rejected", async () => {
  const sessions = new Sessions(config());
  const noIat = validPayload();
  delete noIat.iat;
  delete noIat.auth_time;
  assert.equal(await sessions.verify(await sign(noIat), NOW), null);
  const future = await sign(validPayload({ iat: NOW + 60, auth_time: NOW + 60 }));
  assert.equal(await sessions.verify(future, NOW), null);
  const withinSkew = await sign(validPayload({ iat: NOW + 20, auth_time: NOW + 20 }));
  assert.ok(await sessions.verify(withinSkew, NOW));
});

Deno.test("verify: role must be a non-empty string", async () => {
  const sessions = new Sessions(config());
  for (const role of [42, "", null, ["web_user"], { name: "web_user" }, true]) {
    assert.equal(await sessions.verify(await sign(validPayload({ role })), NOW), null, `${role}`);
  }
  const noRole = validPayload();
  delete noRole.role;
  assert.equal(await sessions.verify(await sign(noRole), NOW), null);
});

Deno.test("verify: tokens over 4096 characters are rejected", async () => {
  const sessions = new Sessions(config());
  const big = await sign(validPayload({ pad: "x".repeat(4000) }));
  assert.ok(big.length > MAX_TOKEN_LENGTH);
  assert.equal(await sessions.verify(big, NOW), null);
});

Deno.test("verify: never throws on garbage input", async () => {
  const sessions = new Sessions(config());
  const inputs: unknown[] = [
    "",
    "garbage",
    "a.b.c",
    "...",
    "eyJ.eyJ.",
    `${b64json("string")}.${b64json([1])}.x`,
    `${b64json({ alg: "HS256" })}.not-json!.sig`,
    null,
    undefined,
    42,
  ];
  for (const input of inputs) {
    assert.equal(await sessions.verify(input as string, NOW), null);
  }
  assert.equal(await sessions.verify(await sign(validPayload()), Number.NaN), null);
});

// ---------------------------------------------------------------- cache

Deno.test("cache: hit returns the same claims; expired cached token is rejected", async () => {
  const sessions = new Sessions(config());
  const token = await sign(validPayload({ exp: NOW + 100 }));
  const first = await sessions.verify(token, NOW);
  assert.ok(first);
  const second = await sessions.verify(token, NOW + 50);
  assert.equal(second, first); // same object: served from the cache
  assert.ok(Object.isFrozen(second));
  assert.equal(await sessions.verify(token, NOW + 100), null);
  assert.equal(await sessions.verify(token, NOW + 1000), null);
  // An earlier clock still works after the expired entry was dropped (re-verified).
  const again = await sessions.verify(token, NOW);
  assert.deepEqual(again, first);
  assert.notEqual(again, first);
});

Deno.test("cache: hit re-checks iat against now", async () => {
  const sessions = new Sessions(config());
  const token = await sign(validPayload({ iat: NOW, auth_time: NOW }));
  assert.ok(await sessions.verify(token, NOW));
  assert.equal(await sessions.verify(token, NOW - 31), null);
  assert.ok(await sessions.verify(token, NOW));
});

Deno.test("cache: cacheSize 0 disables caching", async () => {
  const sessions = new Sessions(config({ cacheSize: 0 }));
  const token = await sign(validPayload());
  const a = await sessions.verify(token, NOW);
  const b = await sessions.verify(token, NOW);
  assert.ok(a && b);
  assert.deepEqual(a, b);
  assert.notEqual(a, b);
});

Deno.test("cache: bounded LRU evicts the least recently used token", async () => {
  const sessions = new Sessions(config({ cacheSize: 2 }));
  const [t1, t2, t3] = await Promise.all(
    ["a", "b", "c"].map((role) => sign(validPayload({ role }))),
  );
  const c1 = await sessions.verify(t1, NOW);
  const c2 = await sessions.verify(t2, NOW);
  assert.equal(await sessions.verify(t1, NOW), c1); // t1 is now most recent
  await sessions.verify(t3, NOW); // evicts t2
  assert.equal(await sessions.verify(t1, NOW), c1);
  const c2again = await sessions.verify(t2, NOW);
  assert.deepEqual(c2again, c2);
  assert.notEqual(c2again, c2);
});

Deno.test("cache: never holds more than cacheSize entries", async () => {
  const sessions = new Sessions(config({ cacheSize: 5 }));
  const tokens = await Promise.all(
    Array.from({ length: 40 }, (_, i) => sign(validPayload({ role: `r${i}` }))),
  );
  for (const t of tokens) {
    assert.ok(await sessions.verify(t, NOW));
    assert.ok(sessions.cacheStats().size <= 5);
  }
  const stats = sessions.cacheStats();
  assert.equal(stats.size, 5);
  assert.equal(stats.bytes, tokens.slice(-5).reduce((n, t) => n + cacheEntryBytes(t), 0));
});

Deno.test("cache: long tokens are bounded by cacheBytes before cacheSize", async () => {
  const budget = 64 * 1024;
  const sessions = new Sessions(config({ cacheSize: 10000, cacheBytes: budget }));
  const pad = "x".repeat(2500);
  const tokens = await Promise.all(
    Array.from({ length: 60 }, (_, i) => sign(validPayload({ role: `r${i}`, pad }))),
  );
  for (const t of tokens) {
    assert.ok(t.length > 3000);
    assert.ok(await sessions.verify(t, NOW));
    assert.ok(sessions.cacheStats().bytes <= budget, JSON.stringify(sessions.cacheStats()));
  }
  const { size, bytes } = sessions.cacheStats();
  // Filled up to the budget: one more entry would not fit.
  assert.ok(size > 1 && size < 60);
  assert.ok(bytes + cacheEntryBytes(tokens[0]) > budget);
  // The most recent token is a hit, the first one was evicted (verified again: a miss).
  const before = sessions.cacheStats();
  assert.ok(await sessions.verify(tokens[59], NOW));
  assert.equal(sessions.cacheStats().hits, before.hits + 1);
  assert.ok(await sessions.verify(tokens[0], NOW));
  assert.equal(sessions.cacheStats().misses, before.misses + 1);
});

Deno.test("cache: a token larger than cacheBytes is verified but not cached", async () => {
  const sessions = new Sessions(config({ cacheBytes: 1000 }));
  const token = await sign(validPayload({ pad: "y".repeat(800) }));
  assert.ok(await sessions.verify(token, NOW));
  assert.ok(await sessions.verify(token, NOW));
  assert.deepEqual(sessions.cacheStats(), { hits: 0, misses: 2, size: 0, bytes: 0 });
});

// ---------------------------------------------------------------- mint

Deno.test("mint: overwrites iat/exp/auth_time and keeps other claims", async () => {
  const sessions = new Sessions(config());
  const { token, claims } = await sessions.mint(
    { role: "web_user", iat: 1, exp: 2, auth_time: 3, email: "a@b.c", tags: ["x"] },
    { now: NOW },
  );
  assert.deepEqual(claims, {
    role: "web_user",
    iat: NOW,
    exp: NOW + MAX_AGE,
    auth_time: NOW,
    email: "a@b.c",
    tags: ["x"],
  });
  const header = JSON.parse(new TextDecoder().decode(base64url.decode(token.split(".")[0])));
  assert.deepEqual(header, { alg: "HS256", typ: "JWT" });
  assert.deepEqual(await new Sessions(config()).verify(token, NOW), claims);
});

Deno.test("mint: uses the configured algorithm", async () => {
  const sessions = new Sessions(config({ algorithm: "HS384" }));
  const { token } = await sessions.mint({ role: "r" }, { now: NOW });
  const header = JSON.parse(new TextDecoder().decode(base64url.decode(token.split(".")[0])));
  assert.equal(header.alg, "HS384");
  assert.ok(await new Sessions(config({ algorithm: "HS384" })).verify(token, NOW));
  assert.equal(await new Sessions(config()).verify(token, NOW), null);
});

Deno.test("mint: caps exp at auth_time + maxSessionAge", async () => {
  const sessions = new Sessions(config());
  const authTime = NOW - MAX_SESSION_AGE + 100;
  const { claims } = await sessions.mint({ role: "r" }, { now: NOW, authTime });
  assert.equal(claims.auth_time, authTime);
  assert.equal(claims.iat, NOW);
  assert.equal(claims.exp, authTime + MAX_SESSION_AGE);
  assert.equal(claims.exp, NOW + 100);
});

Deno.test("mint: rejects a session already past maxSessionAge", async () => {
  const sessions = new Sessions(config());
  await assert.rejects(
    sessions.mint({ role: "r" }, { now: NOW, authTime: NOW - MAX_SESSION_AGE }),
    RangeError,
  );
});

Deno.test("mint: role must be a non-empty string", async () => {
  const sessions = new Sessions(config());
  for (const role of [undefined, "", 42, null, ["r"]]) {
    await assert.rejects(sessions.mint({ role }, { now: NOW }), TypeError);
  }
  await assert.rejects(sessions.mint({}, { now: NOW }), TypeError);
});

// ---------------------------------------------------------------- cookies

Deno.test("cookie / clearCookie: attributes", () => {
  const sessions = new Sessions(config({ sameSite: "Strict", cookieName: "sid" }));
  assert.equal(
    sessions.cookie("abc.def.ghi"),
    "sid=abc.def.ghi; Max-Age=1800; Path=/; HttpOnly; Secure; SameSite=Strict",
  );
  assert.equal(
    sessions.clearCookie(),
    "sid=; Max-Age=0; Path=/; HttpOnly; Secure; SameSite=Strict",
  );
});

// ---------------------------------------------------------------- resolve

Deno.test("resolve: absent cookie → no session, no Set-Cookie", async () => {
  const sessions = new Sessions(config());
  for (const header of [null, "", "other=1; theme=dark", "accesstokenx=abc"]) {
    assert.deepEqual(await sessions.resolve(header, NOW), { claims: null, setCookie: null });
  }
});

Deno.test("resolve: valid fresh token → claims, no renewal before renewAfter", async () => {
  const sessions = new Sessions(config());
  const { token, claims } = await sessions.mint({ role: "web_user" }, { now: NOW });
  // exactly at renewAfter (0.5 of 1800 s) is not yet "more than"
  for (const t of [NOW, NOW + 1, NOW + 900]) {
    const res = await sessions.resolve(`theme=dark; accesstoken=${token}; x=y`, t);
    assert.deepEqual(res, { claims, setCookie: null });
  }
});

Deno.test("resolve: renews after renewAfter keeping role, auth_time and custom claims", async () => {
  const sessions = new Sessions(config());
  const authTime = NOW - 3600;
  const original = await sessions.mint(
    { role: "web_user", email: "a@b.c", org: { id: 7 } },
    { now: NOW, authTime },
  );
  const later = NOW + 901;
  const res = await sessions.resolve(`accesstoken=${original.token}`, later);
  assert.ok(res.claims);
  assert.ok(res.setCookie);
  assert.equal(res.claims.role, "web_user");
  assert.equal(res.claims.email, "a@b.c");
  assert.deepEqual(res.claims.org, { id: 7 });
  assert.equal(res.claims.auth_time, authTime);
  assert.equal(res.claims.iat, later);
  assert.equal(res.claims.exp, later + MAX_AGE);
  assert.notEqual(res.claims.iat, original.claims.iat);
  assert.notEqual(res.claims.exp, original.claims.exp);

  const { name, value } = parseSetCookie(res.setCookie);
  assert.equal(name, "accesstoken");
  assert.notEqual(value, original.token);
  assertCookieAttrs(res.setCookie, MAX_AGE, "Lax");

  // The new cookie verifies (in a fresh instance, i.e. not via the cache) to the same claims.
  const fresh = new Sessions(config());
  assert.deepEqual(await fresh.verify(value, later), res.claims);
  assert.deepEqual(await fresh.resolve(`accesstoken=${value}`, later + 1), {
    claims: res.claims,
    setCookie: null,
  });
});

Deno.test("resolve: renewal respects configured SameSite and cookie name", async () => {
  const sessions = new Sessions(config({ sameSite: "None", cookieName: "sess" }));
  const { token } = await sessions.mint({ role: "r" }, { now: NOW });
  const res = await sessions.resolve(`accesstoken=junk; sess=${token}`, NOW + 1500);
  assert.ok(res.claims && res.setCookie);
  assert.equal(parseSetCookie(res.setCookie).name, "sess");
  assertCookieAttrs(res.setCookie, MAX_AGE, "None");
});

Deno.test("resolve: renewal is capped at auth_time + maxSessionAge", async () => {
  const sessions = new Sessions(config());
  const authTime = NOW - MAX_SESSION_AGE + 1000;
  const { token, claims } = await sessions.mint({ role: "r" }, { now: NOW, authTime });
  assert.equal(claims.exp, NOW + 1000);
  const res = await sessions.resolve(`accesstoken=${token}`, NOW + 600);
  assert.ok(res.claims && res.setCookie);
  assert.equal(res.claims.iat, NOW + 600);
  assert.equal(res.claims.exp, authTime + MAX_SESSION_AGE);
  // The cookie lives as long as the token in it (400 s), not jwt.max_age (1800 s).
  assert.match(res.setCookie, /Max-Age=400(;|$)/);
});

Deno.test("a minted session's cookie lives as long as its token", async () => {
  const sessions = new Sessions(config());
  const fresh = await sessions.mint({ role: "r" }, { now: NOW });
  assert.match(sessions.sessionCookie(fresh), /Max-Age=1800(;|$)/);
  const late = await sessions.mint({ role: "r" }, {
    now: NOW,
    authTime: NOW - MAX_SESSION_AGE + 90,
  });
  assert.match(sessions.sessionCookie(late), /Max-Age=90(;|$)/);
});

Deno.test("resolve: no renewal when the cap leaves nothing to renew", async () => {
  const sessions = new Sessions(config());
  const token = await sign({
    role: "r",
    auth_time: NOW - MAX_SESSION_AGE,
    iat: NOW - 1000,
    exp: NOW + 100,
  });
  const res = await sessions.resolve(`accesstoken=${token}`, NOW);
  assert.ok(res.claims);
  assert.equal(res.setCookie, null);
});

Deno.test("resolve: session past maxSessionAge → no session + clear cookie", async () => {
  const sessions = new Sessions(config());
  const token = await sign({
    role: "r",
    auth_time: NOW - MAX_SESSION_AGE - 1,
    iat: NOW - 10,
    exp: NOW + 1000,
  });
  assert.ok(await sessions.verify(token, NOW)); // the token itself is valid
  assert.deepEqual(await sessions.resolve(`accesstoken=${token}`, NOW), {
    claims: null,
    setCookie: sessions.clearCookie(),
  });
});

Deno.test("resolve: garbage, tampered, expired or foreign tokens → clear cookie", async () => {
  const sessions = new Sessions(config());
  const expired = await sign(validPayload({ exp: NOW - 1 }));
  const hs512 = await sign(validPayload(), "HS512");
  const none = `${b64json({ alg: "none" })}.${b64json(validPayload())}.`;
  const [h, , s] = (await sign(validPayload())).split(".");
  const tampered = `${h}.${b64json(validPayload({ role: "postgres" }))}.${s}`;
  const values = ["garbage", "", "a.b.c", "%E0%A4%A", expired, hs512, none, tampered];
  for (const value of values) {
    const res = await sessions.resolve(`accesstoken=${value}`, NOW);
    assert.equal(res.claims, null);
    assert.ok(res.setCookie);
    assert.equal(res.setCookie, sessions.clearCookie());
    const { value: cleared } = parseSetCookie(res.setCookie);
    assert.equal(cleared, "");
    assertCookieAttrs(res.setCookie, 0);
  }
});

Deno.test("resolve: cookie over 4 KiB → no session + clear cookie", async () => {
  const sessions = new Sessions(config());
  const big = await sign(validPayload({ pad: "y".repeat(4000) }));
  assert.ok(big.length > 4096);
  assert.deepEqual(await sessions.resolve(`accesstoken=${big}`, NOW), {
    claims: null,
    setCookie: sessions.clearCookie(),
  });
});

Deno.test("resolve: duplicate cookie names → no session + clear cookie", async () => {
  const sessions = new Sessions(config());
  const a = await sessions.mint({ role: "a" }, { now: NOW });
  const b = await sessions.mint({ role: "admin" }, { now: NOW });
  for (
    const header of [
      `accesstoken=${a.token}; accesstoken=${b.token}`,
      `accesstoken=${a.token}; accesstoken=${a.token}`,
      `accesstoken=${a.token}; other=1; accesstoken=garbage`,
    ]
  ) {
    assert.deepEqual(await sessions.resolve(header, NOW), {
      claims: null,
      setCookie: sessions.clearCookie(),
    });
  }
});

Deno.test("resolve: quoted cookie value is accepted", async () => {
  const sessions = new Sessions(config());
  const { token, claims } = await sessions.mint({ role: "r" }, { now: NOW });
  assert.deepEqual(await sessions.resolve(`accesstoken="${token}"`, NOW), {
    claims,
    setCookie: null,
  });
});

// ---------------------------------------------------------------- config

Deno.test("constructor: rejects unusable configuration", () => {
  const bad: Partial<SessionConfig>[] = [
    { secret: new Uint8Array() },
    { algorithm: "RS256" as SessionConfig["algorithm"] },
    { maxAge: 0 },
    { renewAfter: 1.5 },
    { maxSessionAge: -1 },
    { cookieName: "a b" },
    { cookieName: "" },
    { sameSite: "lax" as SessionConfig["sameSite"] },
    { cacheSize: -1 },
    { cacheSize: 1.5 },
    { cacheBytes: -1 },
    { cacheBytes: 0.5 },
  ];
  for (const overrides of bad) {
    assert.throws(() => new Sessions(config(overrides)), JSON.stringify(overrides));
  }
});

Deno.test("claims type: resolved claims are frozen", async () => {
  const sessions = new Sessions(config());
  const { token } = await sessions.mint({ role: "r", nested: { a: 1 } }, { now: NOW });
  const claims: Claims | null = await sessions.verify(token, NOW);
  assert.ok(claims);
  assert.ok(Object.isFrozen(claims));
  assert.ok(Object.isFrozen(claims.nested));
});
