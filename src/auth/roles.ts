/**
 * The one check of a request's role, shared by every path that acts as it (the query endpoint,
 * database.json, routes, the generated client): a session's role is accepted only if it exists
 * and the connecting role can switch to it (`pg_has_role(session_user, role, 'MEMBER')`, read
 * with the schema at introspection). Anonymous requests need the anonymous role to exist.
 */
import type { RequestRole } from "../db/pool.ts";
import { canAssume } from "../db/schema.ts";
import { SvcError } from "../svc_error.ts";
import type { AppState } from "../state/runtime.ts";

/**
 * Throws the query path's errors for an unusable role: 401 AUTH_ANONYMOUS_DISABLED when an
 * anonymous request meets no anonymous role, 401 AUTH_ROLE_INVALID when a session's role does not
 * exist or cannot be assumed by the connecting role.
 */
export function checkRole(state: AppState, who: RequestRole, anonymous: boolean): void {
  if (anonymous) {
    if (!state.anonymousExists) {
      throw new SvcError("AUTH_ANONYMOUS_DISABLED", "anonymous access is disabled; log in first");
    }
    return;
  }
  if (!canAssume(state.schema, who.role)) {
    throw new SvcError("AUTH_ROLE_INVALID", "the session's role cannot be used");
  }
}
