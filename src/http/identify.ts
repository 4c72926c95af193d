/**
 * The third step of every request (src/http/server.ts): who it runs as (its session's role and
 * claims, or the anonymous role), the session cookie to send back (a renewal or a clearing), and
 * its cancel signal, fed by the reload gate and by the client going away.
 *
 * @module
 */
import type { Sessions } from "../auth/session.ts";
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
  deps: { sessions: Sessions; anonymousRole: string; clientWatch?: ClientWatch },
): Promise<Identity> {
  const session = await deps.sessions.resolve(req.headers.get("cookie"));
  // A plain controller fed by two listeners: AbortSignal.any measured dearer per request. Both
  // sources belong to this request alone (the shared UNGATED one of health requests never aborts
  // and gets no listener), so nothing outlives the request.
  const ac = new AbortController();
  const signal = ac.signal;
  const client = req.signal;
  const onAbort = (e: Event) => ac.abort((e.target as AbortSignal).reason);
  if (gate.signal.aborted) ac.abort(gate.signal.reason);
  else if (client.aborted) ac.abort(client.reason);
  else {
    if (gate !== UNGATED) gate.signal.addEventListener("abort", onAbort, { once: true });
    client.addEventListener("abort", onAbort, { once: true });
  }
  // The server aborts `req.signal` only for requests whose body came with their head
  // (src/http/disconnect.ts): the others' connections are watched while they run.
  const unwatch = gate === UNGATED ? undefined : deps.clientWatch?.watch(
    info,
    () => ac.abort(new DOMException("the client went away", "AbortError")),
  );
  const claims = session.claims;
  return {
    who: claims
      ? { role: claims.role, claims, signal, requestId }
      : { role: deps.anonymousRole, claims: null, signal, requestId },
    anonymous: !claims,
    setCookie: session.setCookie,
    unwatch,
  };
}
