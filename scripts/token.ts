/**
 * `deno task token <role> [claim=value | claim:=json …] [svc flags]`: mints a development session
 * token for a role, signed the way the server whose configuration it is given verifies it, and
 * prints it with a curl example. The configuration is read by svc's own loader
 * (src/config/load.ts): `--jwt.secret`, `--secrets.dir`, `--config <file>`, `SVC_*__*`
 * environment variables, in `--key=value` or `--key value` form; only the default of
 * `secrets.dir` differs, `.tmp/secrets` (where `deno task dev` keeps its secret). The secret file
 * must exist: only svc creates one. For development only: in production, sessions come from login
 * routes or SSO.
 */
import { type Config, ConfigError, loadConfigAsync } from "../src/config/load.ts";
import { loadSecret, SECRET_FILE_NAME, SecretError } from "../src/auth/secret.ts";
import { sessionsOf } from "../src/auth/session.ts";

const root = new URL("..", import.meta.url).pathname;
const DEV_SECRETS = `${root}.tmp/secrets`;

const USAGE =
  `usage: deno task token <role> [claim=value | claim:=json …] [--<key>=<value> | --<key> <value> …]

Prints a session token for <role>, signed with the secret svc would use with the same
configuration, and a curl example.

  claim=value    a string claim: sub=alice, user_id=1 gives "1"
  claim:=json    a JSON claim: user_id:=1, admin:=true, groups:='["a","b"]'
                 (role, iat, exp and auth_time are set by the task)

The secret and token settings are read as svc reads them (flags, SVC_<SECTION>__<KEY>
environment variables, a config file), e.g.:
  --jwt.secret=<secret>      (or SVC_JWT__SECRET) the server's jwt.secret
  --secrets.dir=<dir>        (or SVC_SECRETS__DIR) the server's secrets.dir, holding ${SECRET_FILE_NAME};
                             default: ${DEV_SECRETS}, the one \`deno task dev\` uses
  --config <file>            (or SVC_CONFIG) the server's config file
  jwt.algorithm, jwt.max_age, jwt.max_session_age and jwt.cookie_name apply too; http.port sets
  the example's port. The ${SECRET_FILE_NAME} file must exist: the task never creates one.`;

/** Exits 2 with `message` on stderr. */
function fail(message: string): never {
  console.error(`token: ${message}`);
  Deno.exit(2);
}

if (Deno.args.includes("--help") || Deno.args.includes("-h")) {
  console.log(USAGE);
  Deno.exit(0);
}

// Words are the role and claims; flags are svc's, with svc's rule: `--key value` when the next
// argument is not a flag itself, `--key=value`, or a bare `--key` (true).
const words: string[] = [];
const flags: string[] = [];
for (let i = 0; i < Deno.args.length; i++) {
  const a = Deno.args[i];
  if (!a.startsWith("--")) words.push(a);
  else if (a.includes("=") || i + 1 >= Deno.args.length || Deno.args[i + 1].startsWith("--")) {
    flags.push(a);
  } else flags.push(a, Deno.args[++i]);
}
const [role, ...claimArgs] = words;
if (!role) {
  console.error(USAGE);
  Deno.exit(2);
}

const claims: Record<string, unknown> = {};
for (const arg of claimArgs) {
  const eq = arg.indexOf("=");
  if (eq <= 0) fail(`claim "${arg}" is neither claim=value nor claim:=json`);
  const json = arg[eq - 1] === ":";
  const key = arg.slice(0, json ? eq - 1 : eq);
  const raw = arg.slice(eq + 1);
  if (key === "") fail(`claim "${arg}" has no name`);
  if (!json) claims[key] = raw;
  else {
    try {
      claims[key] = JSON.parse(raw);
    } catch (e) {
      fail(`claim "${key}": ${JSON.stringify(raw)} is not JSON (${(e as Error).message})`);
    }
  }
}

let cfg: Config;
try {
  cfg = await loadConfigAsync({
    args: flags,
    env: Deno.env.toObject(),
    defaults: { "secrets.dir": DEV_SECRETS },
  });
} catch (e) {
  if (e instanceof ConfigError) fail(`configuration error: ${e.message}`);
  throw e;
}

let secret: Uint8Array;
try {
  secret = await loadSecret({ secret: cfg.jwt.secret, secretsDir: cfg.secrets.dir, create: false });
} catch (e) {
  if (!(e instanceof SecretError)) throw e;
  const hint = cfg.jwt.secret !== undefined
    ? ""
    : cfg.secrets.dir === DEV_SECRETS
    ? "; start `deno task dev` once to create it, or give the secrets.dir (--secrets.dir=<dir>) " +
      "or jwt.secret of the server the token is for"
    : "; only svc creates it (at its first start): give the secrets.dir or jwt.secret of the " +
      "server the token is for";
  fail(`${e.message}${hint}`);
}

const sessions = sessionsOf(cfg.jwt, secret);
let tok: string;
try {
  tok = (await sessions.mint({ ...claims, role })).token;
} catch (e) {
  fail((e as Error).message);
}
console.log(tok);
const age = cfg.jwt.max_age;
const valid = age >= 60 ? `${Math.round(age / 60)} minutes` : `${age} seconds`;
console.error(
  `\n# valid ${valid}; for example (another port: --http.port=<port> or SVC_HTTP__PORT):\n` +
    `curl -s -b '${cfg.jwt.cookie_name}=${tok}' localhost:${cfg.http.port}/svc/database.json | head -c 300`,
);
