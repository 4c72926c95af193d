/**
 * Which session roles svc refuses before any SQL. PostgreSQL decides the rest: the role switch
 * (`set_config('role', …)`) fails for a role the connecting user is not a member of. The one role
 * it always allows is the connecting user itself, so a token naming the authenticator would run
 * with the authenticator's own privileges; svc refuses it (401 AUTH_ROLE_INVALID).
 */
import { SvcError } from "../svc_error.ts";

/** Throws AUTH_ROLE_INVALID when a session's `role` is the role svc connects as. */
export function checkAssumable(role: string, connectingUser: string | undefined): void {
  if (connectingUser !== undefined && role === connectingUser) {
    throw new SvcError("AUTH_ROLE_INVALID", "the session's role cannot be assumed");
  }
}
