/**
 * The third step of every request (src/http/server.ts): who it runs as (its session's role and
 * claims, or the anonymous role), the session cookie to send back (a renewal or a clearing), and
 * its cancel signal, fed by the reload gate and by the client going away.
 *
 * @module
 */
import type { Credential, RequestAuth } from "../auth/bearer.ts";
import type { CancelHooks, RequestRole } from "../auth/roles.ts";
import type { ClientWatch, Watching } from "./disconnect.ts";
import type { Gate } from "./enter.ts";
import { log } from "../observe/log.ts";

/** A request's identity. */
export interface Identity {
  who: RequestRole;
  anonymous: boolean;
  /** The Set-Cookie of a renewed or cleared session, or null. */
  setCookie: string | null;
  /** Stops watching the request's connection (undefined: not watched). */
  unwatch: Watching | undefined;
  /** What the credential was (a Bearer token or the cookie), and a refused token's error. */
  credential: Credential;
}

/** What {@link identify} needs besides the request. */
export interface IdentifyDeps {
  auth: RequestAuth;
  anonymousRole: string;
  clientWatch?: ClientWatch;
  /** Dev mode: a refused session cookie is logged (the request quietly runs as anonymous). */
  dev?: boolean;
}

/** No credential at all: what a health check is resolved with. */
const NO_HEADERS = new Headers();

/**
 * The request's identity. A client that goes away cancels its statement, as reload and shutdown
 * do (also while a large answer streams). At once (no promise) when the credential needs no
 * verification (no Bearer token, no session cookie). With `credentials` false (health checks,
 * which run no SQL as anyone) the request's cookie and `Authorization` are not read at all: a
 * bad token or cookie neither fails the probe nor gets a clearing cookie.
 */
export function identify(
  req: Request,
  requestId: string,
  gate: Gate,
  info: Deno.ServeHandlerInfo | undefined,
  deps: IdentifyDeps,
  credentials = true,
): Identity | Promise<Identity> {
  // A Bearer token, else the session cookie (src/auth/bearer.ts).
  const session = deps.auth.resolve(credentials ? req.headers : NO_HEADERS);
  if (session instanceof Promise) {
    return session.then((s) => identified(s, req, requestId, gate, info, deps));
  }
  return identified(session, req, requestId, gate, info, deps);
}

function identified(
  session: Credential,
  req: Request,
  requestId: string,
  gate: Gate,
  info: Deno.ServeHandlerInfo | undefined,
  deps: IdentifyDeps,
): Identity {
  // One controller per request, fed by the reload gate and by the client going away: the gate's
  // own when it has one (a drain aborts it), else a plain one (a health check: the shared UNGATED
  // gate never aborts and gets no listener). AbortSignal.any, or a second controller listening to
  // the gate, measured dearer per request. Nothing outlives the request.
  const own = gate.abort !== undefined;
  const ac = own ? gate as Gate & { abort(reason: unknown): void } : new AbortController();
  const signal = own ? gate.signal : (ac as AbortController).signal;
  // The server aborts `req.signal` only for requests whose body came with their head
  // (src/http/disconnect.ts): the others' connections are watched while they run. Where the
  // watch sees every request (Linux), `req.signal` is not touched: in Deno it holds a pending
  // operation per request (measured: a third of a small request's throughput, and garbage
  // that lives long enough to be promoted).
  const watch = own ? deps.clientWatch : undefined;
  const client = watch?.covers ? null : req.signal;
  if (!signal.aborted && client) {
    if (client.aborted) ac.abort(client.reason);
    else {
      client.addEventListener(
        "abort",
        (e: Event) => ac.abort((e.target as AbortSignal).reason),
        { once: true },
      );
    }
  }
  const unwatch = watch?.watch(info, ac);
  const role = session.role;
  if (role === null && session.setCookie !== null && deps.dev) {
    log.info(
      "request {requestId}: the session cookie was refused (invalid, expired, past " +
        "jwt.max_session_age, or twice) and cleared; it runs as the anonymous role {role}",
      { requestId, role: deps.anonymousRole },
    );
  }
  // The request's statements hook their cancel on its own gate (no listener per statement batch).
  const cancels = own && gate.hook && gate.unhook ? gate as CancelHooks : undefined;
  return {
    who: role !== null
      ? { role, claims: session.claims, signal, requestId, cancels }
      : { role: deps.anonymousRole, claims: null, signal, requestId, cancels },
    anonymous: role === null,
    setCookie: session.setCookie,
    unwatch,
    credential: session,
  };
}
