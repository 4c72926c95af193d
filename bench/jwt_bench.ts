/**
 * Micro-benchmark of session token verification: `deno bench -A bench/jwt_bench.ts`.
 *
 * @module
 */
import { type SessionConfig, Sessions } from "../src/auth/session.ts";

const config: SessionConfig = {
  secret: new TextEncoder().encode("bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz"),
  algorithm: "HS256",
  maxAge: 1800,
  renewAfter: 0.5,
  maxSessionAge: 604800,
  cookieName: "accesstoken",
  sameSite: "Lax",
};

const NOW = Math.floor(Date.now() / 1000);
const uncached = new Sessions({ ...config, cacheSize: 0 });
const cached = new Sessions(config);
// One hot token, minted by a third instance so the cached instance starts cold.
const { token } = await new Sessions({ ...config, cacheSize: 0 }).mint(
  { role: "web_user", email: "user@example.com" },
  { now: NOW },
);
const cookieHeader = `theme=dark; accesstoken=${token}`;

async function mustVerify(sessions: Sessions): Promise<void> {
  if ((await sessions.verify(token, NOW)) === null) throw new Error("token did not verify");
}

Deno.bench({
  name: "verify, no cache (HMAC every call)",
  group: "verify",
  baseline: true,
  fn: async () => await mustVerify(uncached),
});

Deno.bench({
  name: "verify, LRU cache (hot token)",
  group: "verify",
  fn: async () => await mustVerify(cached),
});

Deno.bench({
  name: "resolve cookie header, no cache",
  group: "resolve",
  baseline: true,
  fn: async () => {
    if ((await uncached.resolve(cookieHeader, NOW)).claims === null) throw new Error("no session");
  },
});

Deno.bench({
  name: "resolve cookie header, LRU cache",
  group: "resolve",
  fn: async () => {
    if ((await cached.resolve(cookieHeader, NOW)).claims === null) throw new Error("no session");
  },
});
