/**
 * Connection settings from a connection string (`postgres://user:pw@host:port/db?param=value` or
 * libpq's `key=value …` form) with libpq's environment fallbacks where the string is silent
 * (PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD, PGPASSFILE/~/.pgpass, PGSSLMODE,
 * PGSSLROOTCERT, PGAPPNAME, PGOPTIONS, PGCONNECT_TIMEOUT, PGCHANNELBINDING). A host starting
 * with `/` is a Unix socket directory. Parameters libpq does not know are sent to the server as
 * startup settings (e.g. `?search_path=app`).
 */
import { PgConnectionError } from "./errors.ts";

/** libpq's sslmode values. */
export type SslMode = "disable" | "allow" | "prefer" | "require" | "verify-ca" | "verify-full";

/** Everything needed to open a connection. */
export interface ConnectConfig {
  /** Hosts tried in order: a host name, an IP address, or a Unix socket directory (`/…`). */
  hosts: string[];
  /** The port of each host (one for all, or one per host). */
  ports: number[];
  /** Login user. */
  user: string;
  /** Password (for password, md5 and scram-sha-256 authentication). */
  password?: string;
  /** Database name. */
  database: string;
  /** TLS mode (default `disable`: svc's connections were unencrypted unless asked, see README). */
  sslmode: SslMode;
  /** Path of a PEM file of trusted CA certificates (`sslrootcert`), or `system`. */
  sslrootcert?: string;
  /** PEM CA certificates given directly (in addition to `sslrootcert`). */
  caCerts?: string[];
  /** `application_name` sent at startup. */
  applicationName?: string;
  /** `options` sent at startup (command-line options of the server process, `-c x=y`). */
  options?: string;
  /** Seconds to establish the connection (0: no limit). */
  connectTimeout: number;
  /** Further startup parameters (server settings). */
  params: Record<string, string>;
}

const SSL_MODES = new Set(["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]);

/** libpq parameters accepted and ignored (nothing to do for them here). */
const IGNORED = new Set([
  "keepalives",
  "keepalives_idle",
  "keepalives_interval",
  "keepalives_count",
  "tcp_user_timeout",
  "sslcompression",
  "sslsni",
  "gssencmode",
  "krbsrvname",
  "gsslib",
  "requirepeer",
  "ssl_min_protocol_version",
  "ssl_max_protocol_version",
  "load_balance_hosts",
  "hostaddr",
  "service",
  "sslcrl",
  "sslcrldir",
]);

function env(name: string): string | undefined {
  try {
    return Deno.env.get(name) || undefined;
  } catch {
    return undefined; // no env permission: as if unset
  }
}

function invalid(message: string): PgConnectionError {
  return new PgConnectionError("08001", `invalid connection string: ${message}`);
}

/**
 * What a postgres:// URI that cannot be read most often holds: a user name or password with a
 * character the URI syntax gives a meaning (`p#ss` cuts the URI, `p/ss` ends the host list).
 */
export const URI_ENCODING_HINT =
  "special characters in the user name or password (such as @ # / : ? %) must be " +
  "percent-encoded (`#` as %23, `/` as %2F, `@` as %40, `:` as %3A, `?` as %3F, `%` as %25; " +
  "encodeURIComponent does it)";

/** decodeURIComponent, a malformed escape (a bare `%`) being an invalid connection string. */
function decodeUri(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    // The text is not repeated: it may be (part of) the password.
    throw invalid(`a "%" in the postgres:// URI starts no %XX escape: ${URI_ENCODING_HINT}`);
  }
}

/** Splits a URI's host list `h1:p1,[::1]:p2,/sock` into hosts and ports. */
function hostList(spec: string): { hosts: string[]; ports: string[] } {
  const hosts: string[] = [];
  const ports: string[] = [];
  for (const part of spec.split(",")) {
    if (part === "") continue;
    let host = part;
    let port = "";
    if (part.startsWith("[")) {
      const close = part.indexOf("]");
      if (close < 0) throw invalid(`unterminated IPv6 address in "${part}"`);
      host = part.slice(1, close);
      if (part[close + 1] === ":") port = part.slice(close + 2);
    } else {
      const colon = part.lastIndexOf(":");
      if (colon >= 0) {
        host = part.slice(0, colon);
        port = part.slice(colon + 1);
      }
    }
    // A port that is no number is most often the start of a password holding `/` or `?` (so it
    // is not repeated).
    if (port !== "" && !/^\d+$/.test(port)) {
      throw invalid(`the port in the postgres:// URI is not a number: ${URI_ENCODING_HINT}`);
    }
    hosts.push(decodeUri(host));
    ports.push(port);
  }
  return { hosts, ports };
}

/** The raw key/value pairs of a connection string (URI or key=value form). */
export function parseConnectionString(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  const m = /^(postgres(?:ql)?):\/\/([^/?#]*)(?:\/([^?#]*))?(?:\?([^#]*))?$/.exec(text.trim());
  if (m) {
    let authority = m[2];
    const at = authority.lastIndexOf("@");
    if (at >= 0) {
      const userinfo = authority.slice(0, at);
      authority = authority.slice(at + 1);
      const colon = userinfo.indexOf(":");
      const user = colon >= 0 ? userinfo.slice(0, colon) : userinfo;
      if (user) out.user = decodeUri(user);
      if (colon >= 0) out.password = decodeUri(userinfo.slice(colon + 1));
    }
    if (authority) {
      const { hosts, ports } = hostList(authority);
      if (hosts.some((h) => h !== "")) out.host = hosts.join(",");
      if (ports.some((p) => p !== "")) out.port = ports.join(",");
    }
    if (m[3]) out.dbname = decodeUri(m[3]);
    if (m[4]) {
      for (const pair of m[4].split("&")) {
        if (!pair) continue;
        const eq = pair.indexOf("=");
        const k = decodeUri((eq >= 0 ? pair.slice(0, eq) : pair).replace(/\+/g, " "));
        const v = eq >= 0 ? decodeUri(pair.slice(eq + 1).replace(/\+/g, " ")) : "";
        out[k] = v;
      }
    }
    return out;
  }
  if (/^postgres(ql)?:\/\//.test(text.trim())) {
    // The scheme is right, the rest is not a URI (`#` in a password cuts it short).
    throw invalid(`cannot parse the postgres:// URI: ${URI_ENCODING_HINT}`);
  }
  if (/^[a-z]+:\/\//i.test(text.trim())) throw invalid("the scheme must be postgres://");
  // key=value pairs; values may be single-quoted with \' and \\ escapes.
  let i = 0;
  const s = text;
  while (i < s.length) {
    while (i < s.length && /\s/.test(s[i])) i++;
    if (i >= s.length) break;
    const eq = s.indexOf("=", i);
    if (eq < 0) throw invalid(`missing "=" after "${s.slice(i, i + 20)}"`);
    const key = s.slice(i, eq).trim();
    i = eq + 1;
    while (i < s.length && /\s/.test(s[i])) i++;
    let value = "";
    if (s[i] === "'") {
      i++;
      for (;;) {
        if (i >= s.length) throw invalid("unterminated quoted value");
        if (s[i] === "\\") {
          value += s[i + 1] ?? "";
          i += 2;
        } else if (s[i] === "'") {
          i++;
          break;
        } else value += s[i++];
      }
    } else {
      while (i < s.length && !/\s/.test(s[i])) {
        if (s[i] === "\\") i++;
        value += s[i++] ?? "";
      }
    }
    out[key] = value;
  }
  return out;
}

function homeDir(): string | undefined {
  return env("HOME");
}

/** The password for a connection from a pgpass file (`host:port:db:user:password` lines). */
export function pgpassLookup(
  text: string,
  host: string,
  port: number,
  database: string,
  user: string,
): string | undefined {
  const want = [host, String(port), database, user];
  for (const line of text.split(/\r?\n/)) {
    if (!line || line.startsWith("#")) continue;
    const fields: string[] = [];
    let cur = "";
    for (let i = 0; i < line.length; i++) {
      if (line[i] === "\\" && i + 1 < line.length) cur += line[++i];
      else if (line[i] === ":" && fields.length < 4) {
        fields.push(cur);
        cur = "";
      } else cur += line[i];
    }
    fields.push(cur);
    if (fields.length < 5) continue;
    const ok = want.every((w, k) => {
      const f = fields[k];
      if (f === "*") return true;
      // A Unix socket directory matches "localhost" too, as in libpq (the default directory).
      if (k === 0 && w.startsWith("/") && f === "localhost") return true;
      return f === w;
    });
    if (ok) return fields[4];
  }
  return undefined;
}

/** Reads the pgpass file (PGPASSFILE or ~/.pgpass) unless it is group/world readable. */
function readPgpass(): string | undefined {
  const path = env("PGPASSFILE") ?? (homeDir() ? `${homeDir()}/.pgpass` : undefined);
  if (!path) return undefined;
  try {
    const st = Deno.statSync(path);
    if (!st.isFile || (st.mode !== null && (st.mode & 0o077) !== 0)) return undefined;
    return Deno.readTextFileSync(path);
  } catch {
    return undefined;
  }
}

function osUser(): string {
  return env("USER") ?? env("LOGNAME") ?? "postgres";
}

/** Builds the settings for `connectionString`, falling back to the environment where silent. */
export function resolveConfig(connectionString: string): ConnectConfig {
  const raw = parseConnectionString(connectionString);
  const params: Record<string, string> = {};
  const known: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(raw)) {
    if (IGNORED.has(k)) continue;
    switch (k) {
      case "host":
      case "port":
      case "user":
      case "password":
      case "dbname":
      case "sslmode":
      case "sslrootcert":
      case "sslcert":
      case "sslkey":
      case "sslpassword":
      case "application_name":
      case "fallback_application_name":
      case "options":
      case "connect_timeout":
      case "channel_binding":
      case "target_session_attrs":
      case "passfile":
        known[k] = v;
        break;
      default:
        params[k] = v;
    }
  }
  const hostText = known.host ?? env("PGHOST") ?? "localhost";
  const hosts = hostText.split(",").map((h) => h.trim() || "localhost");
  const portText = known.port ?? env("PGPORT") ?? "5432";
  const ports = portText.split(",").map((p) => {
    const n = p.trim() === "" ? 5432 : Number(p);
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw invalid(`invalid port "${p}"`);
    return n;
  });
  if (ports.length !== 1 && ports.length !== hosts.length) {
    throw invalid(`${hosts.length} hosts but ${ports.length} ports`);
  }
  const user = known.user ?? env("PGUSER") ?? osUser();
  const database = known.dbname ?? env("PGDATABASE") ?? user;
  const sslmode = (known.sslmode ?? env("PGSSLMODE") ?? "disable") as SslMode;
  if (!SSL_MODES.has(sslmode)) throw invalid(`invalid sslmode "${sslmode}"`);
  if (known.sslcert || known.sslkey) {
    throw invalid("client certificates (sslcert, sslkey) are not supported");
  }
  const channelBinding = known.channel_binding ?? env("PGCHANNELBINDING") ?? "prefer";
  if (channelBinding === "require") {
    throw invalid(
      "channel_binding=require is not supported (SCRAM-SHA-256 without channel binding only)",
    );
  }
  const tsa = known.target_session_attrs ?? "any";
  if (tsa !== "any") throw invalid(`target_session_attrs=${tsa} is not supported`);
  const timeoutText = known.connect_timeout ?? env("PGCONNECT_TIMEOUT") ?? "0";
  const connectTimeout = Number(timeoutText);
  if (!Number.isFinite(connectTimeout) || connectTimeout < 0) {
    throw invalid(`invalid connect_timeout "${timeoutText}"`);
  }
  let password = known.password ?? env("PGPASSWORD");
  if (password === undefined) {
    const text = known.passfile !== undefined
      ? (() => {
        try {
          return Deno.readTextFileSync(known.passfile!);
        } catch {
          return undefined;
        }
      })()
      : readPgpass();
    if (text) password = pgpassLookup(text, hosts[0], ports[0], database, user);
  }
  return {
    hosts,
    ports,
    user,
    password,
    database,
    sslmode,
    sslrootcert: known.sslrootcert ?? env("PGSSLROOTCERT"),
    applicationName: known.application_name ?? env("PGAPPNAME") ??
      known.fallback_application_name,
    options: known.options ?? env("PGOPTIONS"),
    connectTimeout,
    params,
  };
}
