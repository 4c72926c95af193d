/**
 * A real OpenID provider for tests: `oidc-provider` (certified) on 127.0.0.1 with one confidential
 * client (client_secret_basic, PKCE required), its development login and consent forms, e-mail
 * claims (the login name is the e-mail), and a test-owned RS256 signing key. `tamper` rewrites the
 * token endpoint's JSON answer (to play a misbehaving or hostile provider); `forge` signs an ID
 * token with the provider's real key (or another signing key, e.g. one it no longer publishes).
 */
import Provider from "oidc-provider";
import { createServer, type Server } from "node:http";
import { decodeJwt, exportJWK, generateKeyPair, SignJWT } from "jose";

/** A running provider. */
export interface OidcIdp {
  issuer: string;
  port: number;
  clientId: string;
  clientSecret: string;
  /** Rewrites the token endpoint's JSON body (identity by default). */
  tamper: ((body: Record<string, unknown>) => Promise<void> | void) | null;
  /** Makes the userinfo endpoint answer 500. */
  breakUserinfo: boolean;
  /** The provider's signing key and its `kid` (published in its JWKS). */
  signingKey: SigningKey;
  /** Re-signs an ID token with the provider's key (or `key`) after `edit` changed its claims. */
  forge(
    idToken: string,
    edit: (claims: Record<string, unknown>) => void,
    key?: SigningKey,
  ): Promise<string>;
  stop(): Promise<void>;
}

/** A private signing key and its key id. */
export interface SigningKey {
  privateKey: CryptoKey;
  kid: string;
}

/** A new RS256 signing key with key id `kid`. */
export async function newSigningKey(kid: string): Promise<SigningKey> {
  const { privateKey } = await generateKeyPair("RS256", { extractable: true });
  return { privateKey, kid };
}

/** A free loopback port (bound then released). */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

/**
 * Starts the provider on `port` (default: a free one) for the given redirect URIs, signing with
 * `key` (default: a new key with kid `test-key`).
 */
export async function startOidcIdp(
  redirectUris: string[],
  port = freePort(),
  key?: SigningKey,
): Promise<OidcIdp> {
  const signingKey = key ?? await newSigningKey("test-key");
  const jwk = {
    ...(await exportJWK(signingKey.privateKey)),
    kid: signingKey.kid,
    alg: "RS256",
    use: "sig",
  };
  const issuer = `http://127.0.0.1:${port}`;
  const clientId = "svc-test";
  const clientSecret = "svc-test-secret-0123456789-abcdefghij";
  const provider = new Provider(
    issuer,
    {
      clients: [{
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: redirectUris,
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_basic",
      }],
      pkce: { required: () => true },
      jwks: { keys: [jwk] },
      cookies: { keys: ["oidc-provider-test-cookie-key"] },
      claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name"] },
      conformIdTokenClaims: false,
      features: { devInteractions: { enabled: true } },
      findAccount: (_ctx: unknown, id: string) => ({
        accountId: id,
        claims: () => ({ sub: id, email: id, email_verified: true, name: `User ${id}` }),
      }),
    } as ConstructorParameters<typeof Provider>[1],
  );
  const idp: OidcIdp = {
    issuer,
    port,
    clientId,
    clientSecret,
    tamper: null,
    breakUserinfo: false,
    signingKey,
    async forge(idToken, edit, k = signingKey) {
      const claims = decodeJwt(idToken) as Record<string, unknown>;
      edit(claims);
      return await new SignJWT(claims).setProtectedHeader({ alg: "RS256", kid: k.kid })
        .sign(k.privateKey);
    },
    stop: () => Promise.resolve(),
  };
  provider.use(
    async (ctx: { path: string; status: number; body: unknown }, next: () => Promise<unknown>) => {
      if (ctx.path === "/me" && idp.breakUserinfo) {
        ctx.status = 500;
        ctx.body = { error: "server_error" };
        return;
      }
      await next();
      if (ctx.path === "/token" && idp.tamper && ctx.status === 200) {
        const body = { ...(ctx.body as Record<string, unknown>) };
        await idp.tamper(body);
        ctx.body = body;
      }
    },
  );
  const server: Server = createServer(provider.callback());
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  idp.stop = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return idp;
}

/** A minimal cookie jar: name → value for every loopback host (ports share cookies anyway). */
export class Jar {
  readonly cookies = new Map<string, string>();

  /** Stores the `Set-Cookie` headers of a response (Max-Age=0 or empty value deletes). */
  store(res: Response): void {
    for (const line of res.headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(";");
      const eq = pair.indexOf("=");
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      const expired = attrs.some((a) => /^\s*max-age=0\s*$/i.test(a)) ||
        attrs.some((a) => /^\s*expires=.*1970/i.test(a));
      if (expired || value === "") this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
  }

  /** The Cookie header. */
  header(): string {
    return [...this.cookies].map(([k, v]) => `${k}=${v}`).join("; ");
  }

  /** fetch with the jar's cookies, no redirect following; stores what comes back. */
  async fetch(url: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.cookies.size) headers.set("cookie", this.header());
    const res = await fetch(url, { ...init, headers, redirect: "manual" });
    this.store(res);
    return res;
  }
}

/**
 * Drives the provider's login and consent forms from `url` (the provider's authorization URL)
 * until it redirects to a URL starting with `stopAt`, which is returned unvisited.
 */
export async function driveIdp(
  jar: Jar,
  url: string,
  email: string,
  stopAt: string,
): Promise<string> {
  for (let i = 0; i < 20; i++) {
    if (url.startsWith(stopAt)) return url;
    const res = await jar.fetch(url);
    if (res.status >= 300 && res.status < 400) {
      url = new URL(res.headers.get("location")!, url).href;
      continue;
    }
    const html = await res.text();
    if (res.status !== 200) throw new Error(`provider answered ${res.status}: ${html}`);
    const action = /<form[^>]*action="([^"]+)"/.exec(html)?.[1];
    if (!action) throw new Error(`no form in the provider's page: ${html.slice(0, 300)}`);
    const form = new URLSearchParams();
    if (html.includes('value="login"')) {
      form.set("prompt", "login");
      form.set("login", email);
      form.set("password", "any");
    } else form.set("prompt", "consent");
    const post = await jar.fetch(new URL(action.replaceAll("&amp;", "&"), url).href, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: form,
    });
    if (post.status < 300 || post.status >= 400) {
      throw new Error(`form post answered ${post.status}: ${await post.text()}`);
    }
    url = new URL(post.headers.get("location")!, url).href;
  }
  throw new Error("too many steps at the provider");
}
