/**
 * `deno task token <role> [claim=value …]`: mints a development session token for a role with the
 * local JWT secret (the one `deno task dev` generated in `.tmp/secrets/jwt-secret`, or
 * `--secrets.dir=<dir>`), and prints it with a curl example. For development only: in
 * production, sessions come from login routes or SSO.
 */
import { SignJWT } from "jose";
import { loadSecret } from "../src/auth/secret.ts";

const root = new URL("..", import.meta.url).pathname;
const positional = Deno.args.filter((a) => !a.startsWith("--"));
const dirFlag = Deno.args.find((a) => a.startsWith("--secrets.dir="));
const role = positional[0];
if (!role) {
  console.error("usage: deno task token <role> [claim=value …] [--secrets.dir=<dir>]");
  Deno.exit(2);
}
const secretsDir = dirFlag ? dirFlag.slice("--secrets.dir=".length) : `${root}.tmp/secrets`;
const secret = await loadSecret({ secretsDir });
const now = Math.floor(Date.now() / 1000);
const claims: Record<string, unknown> = { role, iat: now, exp: now + 1800, auth_time: now };
for (const kv of positional.slice(1)) {
  const eq = kv.indexOf("=");
  if (eq > 0) claims[kv.slice(0, eq)] = kv.slice(eq + 1);
}
const tok = await new SignJWT(claims).setProtectedHeader({ alg: "HS256", typ: "JWT" }).sign(
  secret,
);
console.log(tok);
// The example's port: SVC_HTTP__PORT as `deno task dev` reads it, else dev's default.
const port = Deno.env.get("SVC_HTTP__PORT") ?? "8080";
console.error(
  `\n# valid 30 minutes; for example (another port: SVC_HTTP__PORT=<port> deno task token …):\n` +
    `curl -s -b 'accesstoken=${tok}' localhost:${port}/svc/database.json | head -c 300`,
);
