/**
 * The third step of every request (src/http/server.ts): who it runs as (its session's role and
 * claims, or the anonymous role), the session cookie to send back (a renewal or a clearing), and
 * its cancel signal, fed by the reload gate and by the client going away.
 *
 * @module
 */
import type { Credential, RequestAuth } from "../auth/bearer.ts";
import type { RequestRole } from "../auth/roles.ts";
import type { ClientWatch } from "./disconnect.ts";
import { type Gate, UNGATED } from "./enter.ts";

/** A request's identity. */
export interface Identity {
  who: RequestRole;
  anonymous: boolean;
  /** The Set-Cookie of a renewed or cleared session, or null. */
  setCookie: string | null;
  /** Stops watching the request's connection (undefined: not watched). */
  unwatch: (() => void) | undefined;
  /** What the credential was (a Bearer token or the cookie), and a refused token's error. */
  credential: Credential;
}

/**
 * The request's identity. A client that goes away cancels its statement, as reload and shutdown
 * do (also while a large answer streams).
 */
export async function identify(
  req: Request,
  requestId: string,
  gate: Gate,
  info: Deno.ServeHandlerInfo | undefined,
  deps: { auth: RequestAuth; anonymousRole: string; clientWatch?: ClientWatch },
): Promise<Identity> {
  // A Bearer token, else the session cookie (src/auth/bearer.ts).
  const session = await deps.auth.resolve(req.headers);
  // A plain controller fed by two listeners: AbortSignal.any measured dearer per request. Both
  // sources belong to this request alone (the shared UNGATED one of health requests never aborts
  // and gets no listener), so nothing outlives the request.
  const ac = new AbortController();
  const signal = ac.signal;
  const onAbort = (e: Event) => ac.abort((e.target as AbortSignal).reason);
  // The server aborts `req.signal` only for requests whose body came with their head
  // (src/http/disconnect.ts): the others' connections are watched while they run. Where the
  // watch sees every request (Linux), `req.signal` is not touched: in Deno it holds a pending
  // operation per request (measured: a third of a small request's throughput, and garbage
  // that lives long enough to be promoted).
  const watch = gate === UNGATED ? undefined : deps.clientWatch;
  const client = watch?.covers ? null : req.signal;
  if (gate.signal.aborted) ac.abort(gate.signal.reason);
  else if (client?.aborted) ac.abort(client.reason);
  else {
    if (gate !== UNGATED) gate.signal.addEventListener("abort", onAbort, { once: true });
    client?.addEventListener("abort", onAbort, { once: true });
  }
  const unwatch = watch?.watch(
    info,
    () => ac.abort(new DOMException("the client went away", "AbortError")),
  );
  const role = session.role;
  return {
    who: role !== null
      ? { role, claims: session.claims, signal, requestId }
      : { role: deps.anonymousRole, claims: null, signal, requestId },
    anonymous: role === null,
    setCookie: session.setCookie,
    unwatch,
    credential: session,
  };
}
