/**
 * Test harness for real HTTP: starts svc in-process on a free loopback port against a test
 * database, and mints session tokens with jose for the configured secret.
 */
import { SignJWT } from "jose";
import { type Config, loadConfig } from "../../src/config/load.ts";
import { type Server, start } from "../../main.ts";

/** The secret every test server signs with. */
export const TEST_SECRET = "test-secret-test-secret-test-secret-0123456789";

/** A running test server. */
export interface TestServer {
  url: string;
  server: Server;
  /** fetch relative to the server, JSON helpers included. */
  post(path: string, body: unknown, headers?: HeadersInit): Promise<Response>;
  get(path: string, headers?: HeadersInit): Promise<Response>;
  stop(): Promise<void>;
}

/** A `/svc` answer read whole: its status, its `x-svc-errorcode`, its body parsed (null if empty). */
export interface SvcAnswer {
  status: number;
  code: string | null;
  /** The parsed JSON, as each test reads it. */
  // deno-lint-ignore no-explicit-any
  body: any;
}

/** POSTs `body` to `/svc` (with `headers`, e.g. a session cookie) and reads the whole answer. */
export async function postSvc(
  srv: TestServer,
  body: unknown,
  headers?: HeadersInit,
): Promise<SvcAnswer> {
  const res = await srv.post("/svc", body, headers);
  const text = await res.text();
  return {
    status: res.status,
    code: res.headers.get("x-svc-errorcode"),
    body: text ? JSON.parse(text) : null,
  };
}

/** A test configuration against `uri` on a free loopback port, plus `flags` (`--key=value`). */
export function testConfig(uri: string, flags: string[] = []): Config {
  return loadConfig({
    args: [
      `--pg.uri=${uri}`,
      "--http.host=127.0.0.1",
      "--http.port=0",
      `--jwt.secret=${TEST_SECRET}`,
      "--logging.level=error",
      ...flags,
    ],
    env: {},
  });
}

/** Starts a server against `uri` with extra config flags (`--key=value`). */
export async function startServer(uri: string, flags: string[] = []): Promise<TestServer> {
  const secrets = await Deno.makeTempDir({ prefix: "svc-secrets-" });
  const wk = await Deno.makeTempDir({ prefix: "svc-wk-" });
  const cfg = testConfig(uri, [
    `--secrets.dir=${secrets}`,
    `--pg.query.wellknown_path=${wk}`,
    "--pg.pool_size=4",
    ...flags,
  ]);
  const server = await start(cfg);
  await server.ready;
  const url = `http://127.0.0.1:${server.port}`;
  return {
    url,
    server,
    post: (path, body, headers) =>
      fetch(url + path, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...Object.fromEntries(new Headers(headers)),
        },
        body: typeof body === "string" ? body : JSON.stringify(body),
      }),
    get: (path, headers) => fetch(url + path, { headers }),
    async stop() {
      await server.shutdown();
      await Deno.remove(secrets, { recursive: true }).catch(() => {});
      await Deno.remove(wk, { recursive: true }).catch(() => {});
    },
  };
}

/** Mints a token for the test secret with exactly the given claims (nothing added). */
export function token(
  claims: Record<string, unknown>,
  alg = "HS256",
  secret = TEST_SECRET,
): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg, typ: "JWT" }).sign(
    new TextEncoder().encode(secret),
  );
}

/** A Cookie header carrying a session token. */
export function cookie(tok: string, name = "accesstoken"): HeadersInit {
  return { cookie: `${name}=${tok}` };
}

/** Seconds since the epoch. */
export function now(): number {
  return Math.floor(Date.now() / 1000);
}
