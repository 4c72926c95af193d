/**
 * The complete table of configuration keys: name (patterns use `<placeholder>` segments), value
 * type, default and a one-line description. The loader, the docs/configuration.md test and `--help` all read it.
 */
import { z } from "zod";
import { DEFAULT_MAX_PARAMS } from "../db/bind_limit.ts";

/** Value kinds a key may hold; strings from env and flags are coerced to them. */
export type KeyKind = "string" | "int" | "number" | "bool" | "list" | "yn" | { enum: string[] };

/** One configuration key. */
export interface KeySpec {
  /** Dotted name; `<x>` segments match any single segment. */
  key: string;
  kind: KeyKind;
  /** Default value (already typed); undefined means unset. "dev" means: follows `dev`. */
  default?: unknown;
  doc: string;
}

/** The individual `http.csp.<directive>` keys (besides default_src and policy). */
export const CSP_DIRECTIVES: readonly string[] = [
  "script_src",
  "style_src",
  "img_src",
  "font_src",
  "connect_src",
  "object_src",
  "frame_ancestors",
  "base_uri",
  "form_action",
];

/** Every known key. Order is the order of docs/configuration.md. */
export const KEYS: KeySpec[] = [
  {
    key: "dev",
    kind: "bool",
    default: false,
    doc:
      "Development mode: database error text and stack traces in generic errors; listens on 127.0.0.1 unless http.host is set; turns the pg.query.allow_* switches, the TypeScript export and the playground on unless set.",
  },
  {
    key: "config",
    kind: "string",
    doc: "Path of a config file (.toml, .yaml/.yml, .huml). Flag `--config` or env `SVC_CONFIG`.",
  },
  {
    key: "secrets.dir",
    kind: "string",
    default: "/secrets",
    doc: "Directory of generated secrets (jwt-secret, OIDC client credentials).",
  },
  // pg
  {
    key: "pg.uri",
    kind: "string",
    doc: "Full connection string; exclusive with the granular pg.* fields.",
  },
  {
    key: "pg.host",
    kind: "string",
    default: "localhost",
    doc: "Database host (when pg.uri is unset).",
  },
  { key: "pg.port", kind: "int", default: 5432, doc: "Database port." },
  { key: "pg.database", kind: "string", doc: "Database name." },
  {
    key: "pg.user",
    kind: "string",
    doc: "Connecting user; must be a member of every role a JWT may carry.",
  },
  { key: "pg.password", kind: "string", doc: "Password of pg.user." },
  {
    key: "pg.schemas",
    kind: "list",
    doc:
      "Exposed schemas (comma-separated): introspection, /svc, routes, database.json and database.ts see only these; anything else answers like a name that does not exist (unset: every schema).",
  },
  {
    key: "pg.pool_size",
    kind: "int",
    default: 10,
    doc: "Max pooled connections for requests, the total across http.workers.",
  },
  {
    key: "pg.pool_timeout",
    kind: "number",
    default: 5,
    doc:
      "Seconds a request waits for a free pooled connection before 503 PG_POOL_EXHAUSTED (with Retry-After).",
  },
  {
    key: "pg.connect_timeout",
    kind: "number",
    default: 5,
    doc:
      "Seconds a new database connection may take; during an outage requests answer 503 PG_UNAVAILABLE within it.",
  },
  {
    key: "pg.prepared_statements",
    kind: "bool",
    default: true,
    doc:
      "Prepare statements once per connection (named, at most 256 each); false sends unnamed statements (parsed every time, still one round trip per request) for PgBouncer in transaction mode.",
  },
  {
    key: "pg.max_lifetime",
    kind: "number",
    default: 3600,
    doc:
      "Seconds a pooled connection serves before it is closed and replaced (each after 90–100% of it); bounds what a backend accumulates (catalog caches, function plans). 0: never replaced.",
  },
  {
    key: "pg.lease_grace",
    kind: "number",
    default: 5,
    doc:
      "Seconds past pg.query.statement_timeout a pooled connection may stay leased without progress before svc closes and replaces it (503 PG_UNAVAILABLE); no limit when that timeout is 0.",
  },
  // A replicated deployment: reload everywhere, read replicas (docs/deployment.md).
  {
    key: "pg.notify_channel",
    kind: "string",
    default: "svc",
    doc:
      "Channel every svc process LISTENs on (a connection of its own): `NOTIFY svc, 'reload'` reloads like SIGUSR1; \"\" disables listening.",
  },
  {
    key: "pg.listen_uri",
    kind: "string",
    doc:
      "Connection string of the listen connection (default: pg.uri); behind a pooler in transaction mode, point it at PostgreSQL directly.",
  },
  {
    key: "pg.read_uri",
    kind: "list",
    default: [],
    doc:
      "Read replicas' connection strings (comma-separated or a list): reads run on a replica that is up and caught up, else on the primary.",
  },
  {
    key: "pg.read_pool_size",
    kind: "int",
    default: 10,
    doc: "Max pooled connections per read replica, the total across http.workers.",
  },
  {
    key: "pg.read_max_lag",
    kind: "number",
    default: 5,
    doc:
      "Seconds a read replica may lag behind the primary (its last replayed commit, checked every 500 ms) before reads skip it.",
  },
  {
    key: "pg.read_primary_claim",
    kind: "string",
    doc:
      "Session claim that sends a session's reads to the primary when true, or when a number of seconds since the epoch still to come.",
  },
  {
    key: "pg.query.anonymous_role",
    kind: "string",
    default: "~anonymous",
    doc: "Role of sessionless requests; if it does not exist, anonymous access is disabled (401).",
  },
  { key: "pg.query.max_depth", kind: "int", default: 6, doc: "Maximum join nesting." },
  {
    key: "pg.query.wellknown_path",
    kind: "string",
    default: "/wellknown",
    doc: "Colon-separated directories searched recursively for well-known query files.",
  },
  {
    key: "pg.query.allow_count",
    kind: "bool",
    default: "dev",
    doc: "Enables the `count` flag (default: dev).",
  },
  {
    key: "pg.query.allow_stats",
    kind: "bool",
    default: "dev",
    doc: "Enables the `stats` flag (default: dev).",
  },
  {
    key: "pg.query.allow_query_plan",
    kind: "bool",
    default: "dev",
    doc: "Enables the `query_plan` flag (default: dev).",
  },
  {
    key: "pg.query.allow_sql",
    kind: "bool",
    default: "dev",
    doc: "Enables the `sql` flag (default: dev).",
  },
  {
    key: "pg.query.allow_rollback",
    kind: "bool",
    default: "dev",
    doc: "Enables the `rollback` flag (default: dev).",
  },
  {
    key: "pg.query.statement_timeout",
    kind: "int",
    default: 30000,
    doc:
      "Per-request statement timeout in milliseconds, set inside each request's transaction (0: no limit); expiry is 504 PG_57014.",
  },
  {
    key: "pg.query.max_joins",
    kind: "int",
    default: 50,
    doc: "Most joins one query tree may hold, at every depth (400 QUERY_INVALID beyond).",
  },
  {
    key: "pg.query.max_params",
    kind: "int",
    default: DEFAULT_MAX_PARAMS,
    doc:
      "Most bind parameters (request values) one statement may carry, 100 to 65533 (the protocol's and driver's limit); 400 QUERY_INVALID beyond, before anything is sent.",
  },
  {
    key: "pg.query.max_row_size",
    kind: "int",
    default: 67108864,
    doc:
      "Largest single answer row in bytes (64 MiB); a larger one cancels the query with 400 QUERY_RESULT_TOO_LARGE.",
  },
  {
    key: "blacklist.relations.<schema>.<name>",
    kind: "yn",
    doc:
      "`y` adds a relation to the blacklist (`*`: the whole schema); `n`: not listed by this configuration (never removes a built-in entry; that is warned about).",
  },
  { key: "blacklist.functions.<schema>.<name>", kind: "yn", doc: "Same for functions." },
  // http
  {
    key: "http.host",
    kind: "string",
    default: "0.0.0.0",
    doc: "Listen address (all interfaces by default).",
  },
  { key: "http.port", kind: "int", default: 8080, doc: "Listen port." },
  {
    key: "http.workers",
    kind: "int",
    doc:
      "Worker threads serving HTTP on the one port (SO_REUSEPORT), each with its share of pg.pool_size (default: the cores the process may use; 1 in dev).",
  },
  {
    key: "http.public_host",
    kind: "string",
    doc: "Externally reachable bare host (no scheme); required for SSO.",
  },
  {
    key: "http.public_scheme",
    kind: { enum: ["http", "https"] },
    doc: "Scheme of SSO redirect and ACS URLs (default: https, http for localhost/127.0.0.1).",
  },
  {
    key: "http.cookies_max_age",
    kind: "int",
    default: 86400,
    doc: "Default max-age of cookies set by a route response (not the JWT cookie).",
  },
  {
    key: "http.max_body_size",
    kind: "int",
    default: 10 * 1024 * 1024,
    doc: "Max request body in bytes (413 before buffering).",
  },
  {
    key: "http.max_part_count",
    kind: "int",
    default: 100,
    doc: "Max multipart parts per declared-route request.",
  },
  {
    key: "http.max_json_depth",
    kind: "int",
    default: 64,
    doc:
      "Deepest nesting of arrays/objects a JSON request body may have (400 QUERY_INVALID beyond).",
  },
  {
    key: "http.max_batch",
    kind: "int",
    default: 100,
    doc: "Most queries one batch (a JSON array on POST /svc) may hold (400 QUERY_INVALID beyond).",
  },
  {
    key: "http.max_header_size",
    kind: "int",
    default: 16384,
    doc: "Max total size of a request's header names and values in bytes (431 beyond).",
  },
  {
    key: "http.body_timeout",
    kind: "int",
    default: 30,
    doc:
      "Seconds a request body may stall between two chunks (one of at most 16 KiB: to arrive whole) before 408 HTTP_BODY_TIMEOUT.",
  },
  {
    key: "http.static.path",
    kind: "string",
    doc: "Colon-separated static directories served as fallback; the first is the write directory.",
  },
  {
    key: "http.upload.dir",
    kind: "string",
    doc: "Subpath of the write directory for streamed uploads (unset: uploads disabled).",
  },
  {
    key: "http.upload.max_size",
    kind: "int",
    doc: "Cap on a streamed upload (default: http.max_body_size).",
  },
  {
    key: "http.templates.path",
    kind: "string",
    default: "/template",
    doc: "Directory of templates.",
  },
  {
    key: "http.typescript.enable",
    kind: "bool",
    default: "dev",
    doc: "Serve /svc/database.ts (default: dev).",
  },
  {
    key: "http.typescript.schemas",
    kind: "list",
    doc: "Whitelist of exportable schemas (default: every schema but pg_catalog).",
  },
  {
    key: "http.functions.allowed_auth",
    kind: "string",
    doc:
      "Regular expression on schema.function names allowed to mint a session (jwt object; jwt null is never gated; unrestricted when unset).",
  },
  {
    key: "http.functions.sso_callback",
    kind: "string",
    doc: "Fallback SSO callback function (schema.function).",
  },
  {
    key: "http.cors.allowed_origins",
    kind: "list",
    default: [],
    doc: "Exact origins, or `*` (empty: closed).",
  },
  {
    key: "http.cors.allowed_methods",
    kind: "list",
    default: ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
    doc: "Methods a preflight may approve.",
  },
  {
    key: "http.cors.allowed_headers",
    kind: "list",
    default: ["content-type", "authorization", "x-requested-with", "accept"],
    doc: "Headers a preflight may approve.",
  },
  { key: "http.cors.max_age", kind: "int", default: 600, doc: "Preflight cache seconds." },
  {
    key: "http.csp.default_src",
    kind: "string",
    default: "'self'",
    doc: "Baseline CSP directive.",
  },
  ...CSP_DIRECTIVES.map((d): KeySpec => ({
    key: `http.csp.${d}`,
    kind: "string",
    doc: `CSP ${d.replace("_", "-")} (default: default_src).`,
  })),
  {
    key: "http.csp.policy",
    kind: "string",
    doc: "Full raw Content-Security-Policy; replaces the individual directives.",
  },
  {
    key: "http.metrics.enable",
    kind: "bool",
    default: "dev",
    doc: "Serve Prometheus metrics at /svc/metrics on the main listener (default: dev).",
  },
  {
    key: "http.metrics.port",
    kind: "int",
    doc:
      "Serve /svc/metrics on a listener of its own on this port of http.metrics.host (whatever http.metrics.enable says); the main listener then does not.",
  },
  {
    key: "http.metrics.host",
    kind: "string",
    default: "127.0.0.1",
    doc: "Address the http.metrics.port listener binds.",
  },
  {
    key: "http.playground.enable",
    kind: "bool",
    default: "dev",
    doc: "Serve the query playground page at /svc/playground (default: dev).",
  },
  {
    key: "route.<schema>.<function>.path",
    kind: "string",
    doc: "Declares a route (path pattern with {name} placeholders).",
  },
  {
    key: "route.<schema>.<function>.method",
    kind: "string",
    doc: "Comma-separated methods (inferred from volatility when unset).",
  },
  {
    key: "route.<schema>.<function>.template",
    kind: "string",
    doc: "Default template of the route.",
  },
  {
    key: "route.<schema>.<function>.stream_upload",
    kind: "bool",
    default: false,
    doc: "Disk-streaming upload flow.",
  },
  {
    key: "route.<schema>.<function>.middleware",
    kind: "bool",
    default: false,
    doc: "Marks a middleware function.",
  },
  // jwt
  {
    key: "jwt.max_age",
    kind: "int",
    default: 1800,
    doc: "Lifetime of a freshly minted token, seconds.",
  },
  {
    key: "jwt.renew_after",
    kind: "number",
    default: 0.5,
    doc: "Fraction of the lifespan after which a used token is renewed.",
  },
  {
    key: "jwt.max_session_age",
    kind: "int",
    default: 604800,
    doc: "Ceiling on total session lifetime from auth_time, seconds.",
  },
  {
    key: "jwt.same_site",
    kind: { enum: ["Strict", "Lax", "None"] },
    default: "Lax",
    doc: "SameSite of the JWT cookie.",
  },
  {
    key: "jwt.algorithm",
    kind: { enum: ["HS256", "HS384", "HS512"] },
    default: "HS256",
    doc: "Signing algorithm.",
  },
  { key: "jwt.cookie_name", kind: "string", default: "accesstoken", doc: "Cookie name." },
  {
    key: "jwt.secure",
    kind: "bool",
    default: true,
    doc:
      "Secure attribute of the session cookie. false only for a plain-http staging host (svc warns at startup); not with jwt.same_site=None.",
  },
  {
    key: "jwt.secret",
    kind: "string",
    doc: "Signing secret (≥ 32 bytes); default: generated into <secrets.dir>/jwt-secret.",
  },
  // jwt: external issuers (src/auth/issuers.ts)
  {
    key: "jwt.jwks_url",
    kind: "string",
    doc:
      "An identity provider's JSON Web Key Set: Bearer tokens signed with RS/PS/ES/EdDSA are verified against it (fetched at startup, for an unknown kid at most every 30 s; unset: HS tokens only).",
  },
  {
    key: "jwt.issuer",
    kind: "string",
    doc: "Required iss of JWKS-verified tokens (unset: not checked; needs jwt.jwks_url).",
  },
  {
    key: "jwt.audience",
    kind: "list",
    doc:
      "Accepted aud values of JWKS-verified tokens, any one of them (unset: not checked; needs jwt.jwks_url).",
  },
  {
    key: "jwt.role_claim",
    kind: "string",
    default: "role",
    doc:
      'Path of the role in JWKS-verified tokens\' claims: `role`, `.app_metadata.role`, `."https://example.com/role"`, `.roles[0]`.',
  },
  // sso
  { key: "openid.<name>.issuer", kind: "string", doc: "OIDC issuer URL (required per entry)." },
  {
    key: "openid.<name>.client_id",
    kind: "string",
    doc: "Client id (default: file <secrets.dir>/openid-<name>.id).",
  },
  {
    key: "openid.<name>.client_secret",
    kind: "string",
    doc: "Client secret (default: file <secrets.dir>/openid-<name>.secret).",
  },
  {
    key: "openid.<name>.scopes",
    kind: "list",
    default: ["openid", "email", "profile"],
    doc: "Scopes.",
  },
  {
    key: "openid.<name>.fetch_userinfo",
    kind: "bool",
    default: false,
    doc: "Merge userinfo claims over the ID token's.",
  },
  {
    key: "openid.<name>.public_host",
    kind: "string",
    doc: "Per-entry public host (default: http.public_host).",
  },
  {
    key: "openid.<name>.callback_function",
    kind: "string",
    doc: "Callback function (default: http.functions.sso_callback).",
  },
  {
    key: "saml.certificate_path",
    kind: "string",
    default: "/secrets/saml.crt",
    doc: "Colon-separated search list of the SP certificate (generated if missing).",
  },
  {
    key: "saml.private_key_path",
    kind: "string",
    default: "/secrets/saml.key",
    doc: "Colon-separated search list of the SP private key.",
  },
  {
    key: "saml.<name>.idp_metadata_url",
    kind: "string",
    doc: "IdP metadata URL (required per entry).",
  },
  {
    key: "saml.<name>.force_signed_requests",
    kind: "bool",
    default: true,
    doc:
      "Sign outgoing AuthnRequests even when the IdP metadata does not ask for it (always signed when it does).",
  },
  {
    key: "saml.<name>.public_host",
    kind: "string",
    doc: "Per-entry public host (default: http.public_host).",
  },
  {
    key: "saml.<name>.callback_function",
    kind: "string",
    doc: "Callback function (default: http.functions.sso_callback).",
  },
  { key: "saml.<name>.certificate_path", kind: "string", doc: "Per-entry SP certificate." },
  { key: "saml.<name>.private_key_path", kind: "string", doc: "Per-entry SP private key." },
  {
    key: "saml.<name>.metadata_refresh",
    kind: "int",
    default: 3600,
    doc:
      "Seconds between IdP metadata re-fetches (sooner when its cacheDuration or validUntil says so; also on reload).",
  },
  {
    key: "saml.<name>.allow_unsolicited",
    kind: "bool",
    default: false,
    doc: "Accept IdP-initiated responses (no InResponseTo, no login started by this browser).",
  },
  {
    key: "saml.<name>.allow_sha1",
    kind: "bool",
    default: false,
    doc: "Accept SHA-1 signatures and digests (RSA-SHA1) from the IdP.",
  },
  {
    key: "saml.<name>.max_response_size",
    kind: "int",
    default: 262144,
    doc: "Largest SAMLResponse in bytes (decoded); larger is 413 before any XML parsing.",
  },
  {
    key: "sso.store",
    kind: "string",
    doc:
      "Table (schema.table) recording consumed SSO assertion and state ids for every process; unset: in memory, per process.",
  },
  // logging, reload, export
  {
    key: "logging.handler",
    kind: { enum: ["pretty", "json"] },
    default: "pretty",
    doc: "Log format.",
  },
  {
    key: "logging.level",
    kind: { enum: ["debug", "info", "warn", "error"] },
    default: "info",
    doc: "Minimum level.",
  },
  {
    key: "logging.filter.<attr>",
    kind: "string",
    doc: "Regular expression a line's attribute must match (lines without it are shown).",
  },
  {
    key: "logging.exclude.<attr>",
    kind: "string",
    doc: "Regular expression suppressing matching lines (after filters).",
  },
  {
    key: "reload.cmd",
    kind: "string",
    doc: "Command run (sh -c) before every reload; env SVC_RELOAD_REASON=startup|signal.",
  },
  {
    key: "reload.timeout",
    kind: "int",
    default: 120,
    doc: "reload.cmd is aborted and the reload fails after this many seconds.",
  },
  {
    key: "reload.drain_timeout",
    kind: "int",
    default: 30,
    doc: "Seconds to wait for in-flight requests at reload and shutdown.",
  },
  {
    key: "typescript.helper_path",
    kind: "string",
    doc: "Where database.ts is written at startup and each reload.",
  },
];

const BOOL_TRUE = new Set(["true", "1", "yes", "y", "on"]);
const BOOL_FALSE = new Set(["false", "0", "no", "n", "off"]);

/** The zod schema that coerces and validates a raw value (string from env/flags, or typed). */
export function schemaFor(kind: KeyKind): z.ZodType {
  if (typeof kind === "object") return z.enum(kind.enum as [string, ...string[]]);
  switch (kind) {
    case "string":
      return z.union([z.string(), z.number().transform(String)]);
    case "int":
      return z.union([z.number(), z.string().regex(/^-?\d+$/).transform(Number)]).pipe(
        z.number().int().min(0),
      );
    case "number":
      return z.union([z.number(), z.string().regex(/^-?\d+(\.\d+)?$/).transform(Number)]).pipe(
        z.number().min(0),
      );
    case "bool":
      return z.union([
        z.boolean(),
        z.string().refine((s) => BOOL_TRUE.has(s.toLowerCase()) || BOOL_FALSE.has(s.toLowerCase()))
          .transform((s) => BOOL_TRUE.has(s.toLowerCase())),
      ]);
    case "yn":
      return z.union([
        z.boolean().transform((b) => (b ? "y" : "n")),
        z.string().transform((s) => s.toLowerCase()).pipe(z.enum(["y", "n"])),
      ]);
    case "list":
      return z.union([
        z.array(z.union([z.string(), z.number().transform(String)])),
        z.string().transform((s) => s.split(",").map((x) => x.trim()).filter((x) => x !== "")),
      ]);
  }
}

/** Describes a kind for error messages. */
export function describeKind(kind: KeyKind): string {
  if (typeof kind === "object") return `one of ${kind.enum.join(", ")}`;
  return {
    string: "a string",
    int: "a non-negative integer",
    number: "a non-negative number",
    bool: "a boolean (true/false)",
    yn: "y or n",
    list: "a list or a comma-separated string",
  }[kind];
}

/** Finds the spec matching a dotted key, with the values of its placeholders. */
export function matchKey(key: string): { spec: KeySpec; captures: string[] } | null {
  const parts = key.split(".");
  for (const spec of KEYS) {
    const pat = spec.key.split(".");
    if (pat.length !== parts.length) continue;
    const captures: string[] = [];
    let ok = true;
    for (let i = 0; i < pat.length; i++) {
      if (pat[i].startsWith("<")) {
        if (parts[i] === "") ok = false;
        captures.push(parts[i]);
      } else if (pat[i] !== parts[i]) ok = false;
      if (!ok) break;
    }
    if (ok) return { spec, captures };
  }
  return null;
}

function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i][j] = Math.min(
        d[i - 1][j] + 1,
        d[i][j - 1] + 1,
        d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
  }
  return d[a.length][b.length];
}

/** The known key closest to an unknown one (patterned keys compared with placeholders filled). */
export function closestKey(key: string): string {
  const parts = key.split(".");
  let best = KEYS[0].key, bestD = Infinity;
  for (const spec of KEYS) {
    const pat = spec.key.split(".");
    const filled = pat.map((p, i) => (p.startsWith("<") ? parts[i] ?? p : p)).join(".");
    const dd = distance(key, filled);
    if (dd < bestD) {
      bestD = dd;
      best = spec.key;
    }
  }
  return best;
}
