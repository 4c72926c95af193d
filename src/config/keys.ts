/**
 * The configuration's one schema: every key with its value kind, default and a one-line
 * description, nested as the configuration is. It validates the loaded configuration
 * ({@link checkConfig}), {@link Config} is its type, and the flat key
 * table {@link KEYS} (names with `<placeholder>` segments for the entries of a map) is read from
 * it: the loader, the docs/configuration.md table (scripts/config_reference.ts) and `--help` all
 * read that.
 */
import { z } from "zod";
import { DEFAULT_MAX_PARAMS } from "../db/bind_limit.ts";

/** Value kinds a key may hold; strings from env and flags are coerced to them. */
export type KeyKind =
  | "string"
  | "int"
  | "port"
  | "number"
  | "bool"
  | "list"
  | "yn"
  | { enum: string[] };

/** One configuration key. */
export interface KeySpec {
  /** Dotted name; `<x>` segments match any single segment. */
  key: string;
  kind: KeyKind;
  /** Default value (already typed); undefined means unset. "dev" means: follows `dev`. */
  default?: unknown;
  doc: string;
  /** Coerces and validates a raw value (a string from env or a flag, or a typed file value). */
  schema: z.ZodType;
}

type Leaf = Omit<KeySpec, "key">;

/** The key of each leaf schema of {@link CONFIG_SCHEMA}. */
const LEAVES = new WeakMap<z.core.$ZodType, Leaf>();
/** The placeholder naming the entries of a map (`<schema>`, `<name>`, …). */
const PLACEHOLDERS = new WeakMap<z.core.$ZodType, string>();

const BOOL_TRUE = new Set(["true", "1", "yes", "y", "on"]);
const BOOL_FALSE = new Set(["false", "0", "no", "n", "off"]);

/**
 * A builder of keys of one kind: `key(doc)` is unset by default, `key(doc, value)` defaults to
 * `value`, `key.entry(doc)` is the value of a map entry (present when the entry is).
 */
function kindOf<S extends z.ZodType>(kind: KeyKind, make: () => S) {
  function key(doc: string): z.ZodOptional<S>;
  function key(doc: string, dflt: z.output<S>): S;
  function key(doc: string, dflt?: z.output<S>): S | z.ZodOptional<S> {
    const schema = make();
    LEAVES.set(schema, { kind, doc, default: dflt, schema });
    if (dflt !== undefined) return schema;
    const optional = schema.optional();
    LEAVES.set(optional, { kind, doc, schema });
    return optional;
  }
  const entry = (doc: string): S => {
    const schema = make();
    LEAVES.set(schema, { kind, doc, schema });
    return schema;
  };
  return Object.assign(key, { entry });
}

const text = kindOf("string", () => z.union([z.string(), z.number().transform(String)]));
const int = kindOf(
  "int",
  () =>
    z.union([z.number(), z.string().regex(/^-?\d+$/).transform(Number)]).pipe(
      z.number().int().min(0),
    ),
);
/** A TCP port: an int from 0 to 65535. */
const port = kindOf(
  "port",
  () =>
    z.union([z.number(), z.string().regex(/^-?\d+$/).transform(Number)]).pipe(
      z.number().int().min(0).max(65535),
    ),
);
const num = kindOf(
  "number",
  () =>
    z.union([z.number(), z.string().regex(/^-?\d+(\.\d+)?$/).transform(Number)]).pipe(
      z.number().min(0),
    ),
);
const bool = kindOf("bool", () =>
  z.union([
    z.boolean(),
    z.string().refine((s) => BOOL_TRUE.has(s.toLowerCase()) || BOOL_FALSE.has(s.toLowerCase()))
      .transform((s) => BOOL_TRUE.has(s.toLowerCase())),
  ]));
const yn = kindOf("yn", () =>
  z.union([
    z.boolean().transform((b) => (b ? "y" : "n")),
    z.string().transform((s) => s.toLowerCase()).pipe(z.enum(["y", "n"])),
  ]));
const list = kindOf("list", () =>
  z.union([
    z.array(z.union([z.string(), z.number().transform(String)])),
    z.string().transform((s) => s.split(",").map((x) => x.trim()).filter((x) => x !== "")),
  ]));

/** A switch that follows `dev` unless set. */
function devSwitch(doc: string) {
  const schema = bool.entry(doc);
  LEAVES.set(schema, { kind: "bool", doc, default: "dev", schema });
  return schema;
}

/** A key holding one of `values`. */
function oneOf<const T extends readonly [string, ...string[]]>(
  values: T,
  doc: string,
): z.ZodOptional<z.ZodEnum<{ [K in T[number]]: K }>>;
function oneOf<const T extends readonly [string, ...string[]]>(
  values: T,
  doc: string,
  dflt: T[number],
): z.ZodEnum<{ [K in T[number]]: K }>;
function oneOf<const T extends readonly [string, ...string[]]>(
  values: T,
  doc: string,
  dflt?: T[number],
) {
  const key = kindOf({ enum: [...values] }, () => z.enum(values));
  return dflt === undefined ? key(doc) : key(doc, dflt);
}

/** Names the entries of a map for {@link KEYS} (`<placeholder>`). */
function named<S extends z.ZodType>(placeholder: string, schema: S): S {
  PLACEHOLDERS.set(schema, placeholder);
  return schema;
}

/** A map of entries named by `<placeholder>`. */
function each<S extends z.ZodType>(placeholder: string, schema: S) {
  return z.record(z.string(), named(placeholder, schema));
}

const CSP_DIRECTIVE_KEYS = Object.fromEntries(
  [
    "script_src",
    "style_src",
    "img_src",
    "font_src",
    "connect_src",
    "object_src",
    "frame_ancestors",
    "base_uri",
    "form_action",
  ].map((d) => [d, text(`CSP ${d.replace("_", "-")} (default: default_src).`)]),
);

/** The individual `http.csp.<directive>` keys (besides default_src and policy). */
export const CSP_DIRECTIVES: readonly string[] = Object.keys(CSP_DIRECTIVE_KEYS);

/** A route declared in configuration (`route.<schema>.<function>`). */
const ROUTE_ENTRY = z.object({
  path: text("Declares a route (path pattern with {name} placeholders)."),
  method: text("Comma-separated methods (inferred from volatility when unset)."),
  template: text("Default template of the route."),
  stream_upload: bool("Disk-streaming upload flow.", false),
  middleware: bool("Marks a middleware function.", false),
});

/** An OIDC provider entry (`openid.<name>`). */
const OPENID_ENTRY = z.object({
  issuer: text("OIDC issuer URL (required per entry)."),
  client_id: text("Client id (default: file <secrets.dir>/openid-<name>.id)."),
  client_secret: text("Client secret (default: file <secrets.dir>/openid-<name>.secret)."),
  scopes: list("Scopes.", ["openid", "email", "profile"]),
  fetch_userinfo: bool("Merge userinfo claims over the ID token's.", false),
  public_host: text("Per-entry public host (default: http.public_host)."),
  callback_function: text("Callback function (default: http.functions.sso_callback)."),
});

/** A SAML provider entry (`saml.<name>`). */
const SAML_ENTRY = z.object({
  idp_metadata_url: text("IdP metadata URL (required per entry)."),
  force_signed_requests: bool(
    "Sign outgoing AuthnRequests even when the IdP metadata does not ask for it (always signed when it does).",
    true,
  ),
  public_host: text("Per-entry public host (default: http.public_host)."),
  callback_function: text("Callback function (default: http.functions.sso_callback)."),
  certificate_path: text("Per-entry SP certificate."),
  private_key_path: text("Per-entry SP private key."),
  metadata_refresh: int(
    "Seconds between IdP metadata re-fetches (sooner when its cacheDuration or validUntil says so; also on reload).",
    3600,
  ),
  allow_unsolicited: bool(
    "Accept IdP-initiated responses (no InResponseTo, no login started by this browser).",
    false,
  ),
  allow_sha1: bool("Accept SHA-1 signatures and digests (RSA-SHA1) from the IdP.", false),
  max_response_size: int(
    "Largest SAMLResponse in bytes (decoded); larger is 413 before any XML parsing.",
    262144,
  ),
});

/** Every known key, nested as the configuration is. Order is the order of docs/configuration.md. */
const CONFIG_SCHEMA = z.object({
  dev: bool(
    "Development mode: database error text and stack traces in generic errors; listens on 127.0.0.1 unless http.host is set; turns the pg.query.allow_* switches, the TypeScript export and the playground on unless set.",
    false,
  ),
  config: text(
    "Path of a config file (.toml, .yaml/.yml, .huml). Flag `--config` or env `SVC_CONFIG`.",
  ),
  secrets: z.object({
    dir: text("Directory of generated secrets (jwt-secret, OIDC client credentials).", "/secrets"),
  }),
  pg: z.object({
    uri: text("Full connection string; exclusive with the granular pg.* fields."),
    host: text("Database host (when pg.uri is unset).", "localhost"),
    port: port("Database port.", 5432),
    database: text("Database name."),
    user: text("Connecting user; must be a member of every role a JWT may carry."),
    password: text("Password of pg.user."),
    schemas: list(
      "Exposed schemas (comma-separated): introspection, /svc, routes, database.json and database.ts see only these; anything else answers like a name that does not exist (unset: every schema).",
    ),
    pool_size: int("Max pooled connections for requests, the total across http.workers.", 10),
    pool_timeout: num(
      "Seconds a request waits for a free pooled connection before 503 PG_POOL_EXHAUSTED (with Retry-After).",
      5,
    ),
    stall_timeout: num(
      "Seconds a pooled connection may wait for a client to take the next chunk of its streamed answer while other requests wait for a connection; then the rest of the answer is read ahead into memory (http.read_ahead) and the connection freed, or the answer is ended (truncated) when it does not fit.",
      1,
    ),
    connect_timeout: num(
      "Seconds a new database connection may take; during an outage requests answer 503 PG_UNAVAILABLE within it.",
      5,
    ),
    prepared_statements: bool(
      "Prepare statements once per connection (named, at most 256 each); false sends unnamed statements (parsed every time, still one round trip per request) for PgBouncer in transaction mode.",
      true,
    ),
    max_lifetime: num(
      "Seconds a pooled connection serves before it is closed and replaced (each after 90–100% of it); bounds what a backend accumulates (catalog caches, function plans). 0: never replaced.",
      3600,
    ),
    lease_grace: num(
      "Seconds past pg.query.statement_timeout a pooled connection may stay leased without progress before svc closes and replaces it (503 PG_UNAVAILABLE); no limit when that timeout is 0.",
      5,
    ),
    // A replicated deployment: reload everywhere, read replicas (docs/deployment.md).
    notify_channel: text(
      "Channel every svc process LISTENs on (a connection of its own): `NOTIFY svc, 'reload'` reloads like SIGUSR1; \"\" disables listening.",
      "svc",
    ),
    listen_uri: text(
      "Connection string of the listen connection (default: pg.uri); behind a pooler in transaction mode, point it at PostgreSQL directly.",
    ),
    read_uri: list(
      "Read replicas' connection strings (comma-separated or a list): reads run on a replica that is up and caught up, else on the primary.",
      [],
    ),
    read_pool_size: int(
      "Max pooled connections per read replica, the total across http.workers.",
      10,
    ),
    read_max_lag: num(
      "Seconds a read replica may lag behind the primary (its last replayed commit, checked every 500 ms) before reads skip it.",
      5,
    ),
    read_primary_claim: text(
      "Session claim that sends a session's reads to the primary when true, or when a number of seconds since the epoch still to come.",
    ),
    query: z.object({
      anonymous_role: text(
        "Role of sessionless requests; if it does not exist, anonymous access is disabled (401).",
        "~anonymous",
      ),
      max_depth: int("Maximum join nesting.", 6),
      wellknown_path: text(
        "Colon-separated directories searched recursively for well-known query files.",
        "/wellknown",
      ),
      allow_count: devSwitch("Enables the `count` flag (default: dev)."),
      allow_stats: devSwitch("Enables the `stats` flag (default: dev)."),
      allow_query_plan: devSwitch("Enables the `query_plan` flag (default: dev)."),
      allow_sql: devSwitch("Enables the `sql` flag (default: dev)."),
      allow_rollback: devSwitch("Enables the `rollback` flag (default: dev)."),
      statement_timeout: int(
        "Per-request statement timeout in milliseconds, set inside each request's transaction (0: no limit); expiry is 504 PG_57014.",
        30000,
      ),
      transaction_timeout: int(
        "Milliseconds a request may run its statements in all (a batch, a write, a route's chain; time waiting for a slow client to take a streamed answer not counted); past it the request is cancelled, 504 PG_57014, and its connection closed pg.lease_grace later if still busy (0: no limit).",
        60000,
      ),
      max_joins: int(
        "Most joins one query tree may hold, at every depth (400 QUERY_INVALID beyond).",
        50,
      ),
      max_params: int(
        "Most bind parameters (request values) one statement may carry, 100 to 65533 (the protocol's and driver's limit); 400 QUERY_INVALID beyond, before anything is sent.",
        DEFAULT_MAX_PARAMS,
      ),
      max_statement_size: int(
        "Longest SQL text one statement may have, in characters (256 KiB, besides 32 per bind parameter); a query compiling to more is 400 QUERY_INVALID before anything is sent (a backend's memory for a statement grows with its text: ≈ 90 MB for 1 MB of nested expressions). Statements over 16 KiB are run unnamed, never kept prepared.",
        262144,
      ),
      max_row_size: int(
        "Largest single answer row in bytes (64 MiB); a larger one fails the request with 400 QUERY_RESULT_TOO_LARGE, never buffered by svc.",
        67108864,
      ),
    }),
  }),
  blacklist: z.object({
    relations: each(
      "schema",
      each(
        "name",
        yn.entry(
          "`y` adds a relation to the blacklist (`*`: the whole schema); `n`: not listed by this configuration (never removes a built-in entry; that is warned about).",
        ),
      ),
    ),
    functions: each("schema", each("name", yn.entry("Same for functions."))),
  }),
  http: z.object({
    host: text("Listen address (all interfaces by default).", "0.0.0.0"),
    port: port("Listen port.", 8080),
    workers: int(
      "Worker threads serving HTTP on the one port (SO_REUSEPORT), each with its share of pg.pool_size (default: the cores the process may use; 1 in dev).",
    ),
    public_host: text("Externally reachable bare host (no scheme); required for SSO."),
    public_scheme: oneOf(
      ["http", "https"],
      "Scheme of SSO redirect and ACS URLs (default: https, http for localhost/127.0.0.1).",
    ),
    cookies_max_age: int(
      "Default max-age of cookies set by a route response (not the JWT cookie).",
      86400,
    ),
    max_body_size: int("Max request body in bytes (413 before buffering).", 10 * 1024 * 1024),
    max_part_count: int("Max multipart parts per declared-route request.", 100),
    max_json_depth: int(
      "Deepest nesting of arrays/objects a JSON request body, or the tree a GET query string stands for, may have (400 QUERY_INVALID beyond).",
      64,
    ),
    max_batch: int(
      "Most queries one batch (a JSON array on POST /svc) may hold (400 QUERY_INVALID beyond).",
      100,
    ),
    max_header_size: int(
      "Max total size of a request's header lines (name, value and 4 bytes each) in bytes (431 beyond).",
      16384,
    ),
    body_timeout: int(
      "Seconds a request body may stall between two chunks (one of at most 16 KiB: to arrive whole) before 408 HTTP_BODY_TIMEOUT.",
      30,
    ),
    body_budget: int(
      "Bytes of large request bodies (64 KiB and over: POST /svc, and routes' JSON, form and text bodies) a worker decodes and runs at once (a write's planning costs tens of times its body); a body beyond it waits for room (one is always admitted alone), up to pg.query.statement_timeout, then 503 HTTP_BUSY. 0: no limit.",
      8 * 1024 * 1024,
    ),
    receive_budget: int(
      "Bytes of request bodies still arriving (streamed ones, over 16 KiB, until read whole) a worker holds at once; a body that would go beyond is 503 HTTP_BUSY unless it is the only one arriving. 0: no limit.",
      64 * 1024 * 1024,
    ),
    read_ahead: int(
      "Bytes of streamed answers a worker may hold for clients too slow for a busy pool (see pg.stall_timeout); 0: such answers are ended instead.",
      32 * 1024 * 1024,
    ),
    send_timeout: int(
      "Seconds an answer read ahead of its client (see http.read_ahead) may wait for the client to take a chunk before svc ends it.",
      60,
    ),
    static: z.object({
      path: text(
        "Colon-separated static directories served as fallback; the first is the write directory.",
      ),
    }),
    upload: z.object({
      dir: text("Subpath of the write directory for streamed uploads (unset: uploads disabled)."),
      max_size: int("Cap on a streamed upload (default: http.max_body_size)."),
    }),
    templates: z.object({
      path: text("Directory of templates.", "/template"),
    }),
    typescript: z.object({
      enable: devSwitch("Serve /svc/database.ts (default: dev)."),
      schemas: list("Whitelist of exportable schemas (default: every schema but pg_catalog)."),
    }),
    functions: z.object({
      allowed_auth: text(
        "Regular expression on schema.function names allowed to mint a session (jwt object; jwt null is never gated; unrestricted when unset).",
      ),
      sso_callback: text("Fallback SSO callback function (schema.function)."),
    }),
    cors: z.object({
      allowed_origins: list("Exact origins, or `*` (empty: closed).", []),
      allowed_methods: list("Methods a preflight may approve.", [
        "GET",
        "POST",
        "PUT",
        "PATCH",
        "DELETE",
        "OPTIONS",
      ]),
      allowed_headers: list("Headers a preflight may approve.", [
        "content-type",
        "authorization",
        "x-requested-with",
        "accept",
      ]),
      max_age: int("Preflight cache seconds.", 600),
    }),
    csp: z.object({
      default_src: text("Baseline CSP directive.", "'self'"),
      ...CSP_DIRECTIVE_KEYS,
      policy: text("Full raw Content-Security-Policy; replaces the individual directives."),
    }),
    metrics: z.object({
      enable: devSwitch(
        "Serve Prometheus metrics at /svc/metrics on the main listener (default: dev).",
      ),
      port: port(
        "Serve /svc/metrics on a listener of its own on this port of http.metrics.host (whatever http.metrics.enable says); the main listener then does not.",
      ),
      host: text("Address the http.metrics.port listener binds.", "127.0.0.1"),
    }),
    playground: z.object({
      enable: devSwitch("Serve the query playground page at /svc/playground (default: dev)."),
    }),
  }),
  route: each(
    "schema",
    each(
      "function",
      ROUTE_ENTRY,
    ),
  ),
  jwt: z.object({
    max_age: int("Lifetime of a freshly minted token, seconds.", 1800),
    renew_after: num("Fraction of the lifespan after which a used token is renewed.", 0.5),
    max_session_age: int("Ceiling on total session lifetime from auth_time, seconds.", 604800),
    same_site: oneOf(["Strict", "Lax", "None"], "SameSite of the JWT cookie.", "Lax"),
    algorithm: oneOf(["HS256", "HS384", "HS512"], "Signing algorithm.", "HS256"),
    cookie_name: text("Cookie name.", "accesstoken"),
    secure: bool(
      "Secure attribute of the session cookie. false only for a plain-http staging host (svc warns at startup); not with jwt.same_site=None.",
      true,
    ),
    secret: text("Signing secret (≥ 32 bytes); default: generated into <secrets.dir>/jwt-secret."),
    // External issuers (src/auth/issuers.ts).
    jwks_url: text(
      "An identity provider's JSON Web Key Set: Bearer tokens signed with RS/PS/ES/EdDSA are verified against it (fetched at startup and at every reload, for an unknown kid at most every 30 s, in the background after 10 min; unset: HS tokens only).",
    ),
    issuer: text("Required iss of JWKS-verified tokens (unset: not checked; needs jwt.jwks_url)."),
    audience: list(
      "Accepted aud values of JWKS-verified tokens, any one of them (unset: not checked; needs jwt.jwks_url).",
    ),
    role_claim: text(
      'Path of the role in JWKS-verified tokens\' claims: `role`, `.app_metadata.role`, `."https://example.com/role"`, `.roles[0]`.',
      "role",
    ),
  }),
  openid: each(
    "name",
    OPENID_ENTRY,
  ),
  saml: z.object({
    certificate_path: text(
      "Colon-separated search list of the SP certificate (generated if missing; default: <secrets.dir>/saml.crt).",
    ),
    private_key_path: text(
      "Colon-separated search list of the SP private key (default: <secrets.dir>/saml.key).",
    ),
  }).catchall(named(
    "name",
    SAML_ENTRY,
  )),
  sso: z.object({
    store: text(
      "Table (schema.table) recording consumed SSO assertion and state ids for every process; unset: in memory, per process.",
    ),
  }),
  logging: z.object({
    handler: oneOf(
      ["pretty", "json"],
      "Log format (pretty: coloured unless the NO_COLOR environment variable is set).",
      "pretty",
    ),
    level: oneOf(["debug", "info", "warn", "error"], "Minimum level.", "info"),
    filter: each(
      "attr",
      text.entry("Regular expression a line's attribute must match (lines without it are shown)."),
    ),
    exclude: each(
      "attr",
      text.entry("Regular expression suppressing matching lines (after filters)."),
    ),
  }),
  reload: z.object({
    cmd: text(
      "Command run (sh -c) before every reload; env SVC_RELOAD_REASON=startup|signal|notify.",
    ),
    timeout: int("reload.cmd is aborted and the reload fails after this many seconds.", 120),
    drain_timeout: int("Seconds to wait for in-flight requests at reload and shutdown.", 30),
  }),
  typescript: z.object({
    helper_path: text("Where database.ts is written at startup and each reload."),
  }),
});

/** A route declared in configuration. */
export type RouteConfig = z.output<typeof ROUTE_ENTRY>;

/** An OIDC provider entry. */
export type OpenIdConfig = z.output<typeof OPENID_ENTRY>;

/** A SAML provider entry. */
export type SamlConfig = z.output<typeof SAML_ENTRY>;

/** The typed, validated configuration: the type {@link CONFIG_SCHEMA} reads. */
export type Config = z.output<typeof CONFIG_SCHEMA>;

/**
 * Validates an assembled configuration (every key already checked and defaulted by the loader)
 * against the schema; throws an Error naming the first key that does not fit.
 */
export function checkConfig(raw: unknown): Config {
  const checked = CONFIG_SCHEMA.safeParse(raw);
  if (checked.success) return checked.data;
  const issue = checked.error.issues[0];
  throw new Error(`"${issue.path.join(".")}": ${issue.message}`);
}

/** Every known key, flat, in the schema's order. */
export const KEYS: readonly KeySpec[] = flatKeys(CONFIG_SCHEMA, [], []);

function flatKeys(schema: z.core.$ZodType, path: string[], out: KeySpec[]): KeySpec[] {
  const leaf = LEAVES.get(schema);
  const entries = (s: z.core.$ZodType) => `<${PLACEHOLDERS.get(s) ?? "name"}>`;
  if (leaf) {
    out.push({ key: path.join("."), ...leaf });
  } else if (schema instanceof z.ZodRecord) {
    flatKeys(schema.valueType, [...path, entries(schema.valueType)], out);
  } else if (schema instanceof z.ZodObject) {
    for (const [k, v] of Object.entries(schema.shape)) flatKeys(v, [...path, k], out);
    const rest = schema.def.catchall;
    if (rest) flatKeys(rest, [...path, entries(rest)], out);
  } else {
    throw new Error(`config schema: ${path.join(".")} is neither a key nor a group of keys`);
  }
  return out;
}

/** Describes a kind for error messages. */
export function describeKind(kind: KeyKind): string {
  if (typeof kind === "object") return `one of ${kind.enum.join(", ")}`;
  return {
    string: "a string",
    int: "a non-negative integer",
    port: "a port number (0 to 65535)",
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
