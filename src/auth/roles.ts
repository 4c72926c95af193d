/**
 * The role rules, in one place: who a request runs as, which session roles svc refuses before
 * any SQL, the statement that switches a transaction to the request's role, and what a failed
 * switch means.
 *
 * PostgreSQL decides who may be what: the role switch (`set_config('role', …)`) fails for a role
 * the connecting user is not a member of. svc refuses up front only what it can know from the
 * schema read at introspection: a session's role is accepted if it exists and the connecting role
 * can switch to it (`pg_has_role(session_user, role, 'MEMBER')`); anonymous requests need the
 * anonymous role to exist. The one role PostgreSQL always allows is the connecting user itself,
 * so a token naming the authenticator would run with the authenticator's own privileges; svc
 * refuses it (401 AUTH_ROLE_INVALID). Every path that acts as the request's role (the query
 * endpoint, database.json, routes, the generated client) goes through these rules.
 *
 * @module
 */
import { SvcError } from "../svc_error.ts";
import { log } from "../observe/log.ts";
import type { RowSink, Statement } from "../pg/connection.ts";

/** Who a request runs as. */
export interface RequestRole {
  role: string;
  /** Session claims, or null when anonymous (set as JSON `null`). */
  claims: Record<string, unknown> | null;
  /** Aborting it cancels the request's running statement (reload drain timeout, shutdown). */
  signal?: AbortSignal;
  /** The request's `X-Request-Id`, set as `svc.request_id` for the transaction. */
  requestId?: string;
  /**
   * The request's transactions are read-only (`GET /svc`: a link another site's page can make a
   * browser follow with its cookie must not write; docs/security.md).
   */
  readOnly?: boolean;
  /**
   * Where what runs the request's statements hooks its cancel, when `signal` aborts: the
   * request's own controller (src/http/identify.ts), cheaper than a listener on `signal` per
   * statement batch; absent: a listener on `signal`.
   */
  cancels?: CancelHooks;
}

/** Something to cancel when a request is aborted (a lease's running statement). */
export interface Cancelable {
  cancel(): void;
}

/** Hooks called, each once, when a request's signal aborts. */
export interface CancelHooks {
  /** Calls `c.cancel()` when the request aborts (at once when it has). */
  hook(c: Cancelable): void;
  /** Withdraws a hook (no-op when not hooked). */
  unhook(c: Cancelable): void;
}

/** What the schema read at introspection says about roles (see src/db/schema.ts). */
export interface RoleFacts {
  /** Every role that exists. */
  roles: ReadonlySet<string>;
  /** Roles the connecting role can switch to (undefined: not known, every role). */
  switchableRoles?: ReadonlySet<string>;
  /** The connecting role. */
  currentUser?: string;
}

/** Whether a session's role is usable: it exists and the connecting role can switch to it. */
export function canAssume(facts: RoleFacts, role: string): boolean {
  if (!facts.roles.has(role)) return false;
  return facts.switchableRoles === undefined || facts.switchableRoles.has(role);
}

/**
 * 401 AUTH_ROLE_INVALID for a session's role svc cannot use, saying why to the operator (the log,
 * and `dev_reason` in dev mode): the role does not exist, or the connecting role may not switch to
 * it (with the grant that would let it).
 */
export function roleInvalid(facts: RoleFacts, role: string): SvcError {
  const err = new SvcError("AUTH_ROLE_INVALID", "the session's role cannot be used");
  const user = facts.currentUser ?? "the connecting role";
  err.devReason = !facts.roles.has(role)
    ? `role ${JSON.stringify(role)} does not exist`
    : `${JSON.stringify(user)} is not a member of role ${JSON.stringify(role)}: ` +
      `grant ${quoteRole(role)} to ${quoteRole(user)}`;
  log.warn("a session's role cannot be used: {reason}", { reason: err.devReason });
  return err;
}

/** A role name as SQL would write it (quoted unless a plain lower-case identifier). */
function quoteRole(name: string): string {
  return /^[a-z_][a-z0-9_$]*$/.test(name) ? name : `"${name.replaceAll('"', '""')}"`;
}

/** Throws AUTH_ROLE_INVALID when a session's `role` is the role svc connects as. */
export function checkAssumable(role: string, connectingUser: string | undefined): void {
  if (connectingUser !== undefined && role === connectingUser) {
    throw new SvcError("AUTH_ROLE_INVALID", "the session's role cannot be assumed");
  }
}

/**
 * Throws the query path's errors for an unusable role: 401 AUTH_ANONYMOUS_DISABLED when an
 * anonymous request meets no anonymous role, 401 AUTH_ROLE_INVALID when a session's role does not
 * exist or cannot be assumed by the connecting role.
 */
export function checkRole(
  state: { anonymousExists: boolean; schema: RoleFacts },
  who: RequestRole,
  anonymous: boolean,
): void {
  if (anonymous) {
    if (!state.anonymousExists) {
      throw new SvcError("AUTH_ANONYMOUS_DISABLED", "anonymous access is disabled; log in first");
    }
    return;
  }
  if (!canAssume(state.schema, who.role)) throw roleInvalid(state.schema, who.role);
}

const SET_ROLE = "select set_config('role', $1, true), set_config('svc.jwt.claims', $2, true), " +
  "set_config('statement_timeout', $3, true), set_config('svc.request_id', $4, true)";
/** {@link SET_ROLE} making the transaction read-only too (`SET TRANSACTION READ ONLY`). */
const SET_ROLE_READ_ONLY = `${SET_ROLE}, set_config('transaction_read_only', 'on', true)`;

/**
 * The statement switching a transaction to the request's role, with its claims, statement
 * timeout (ms) and request id (and making it read-only for a `readOnly` request). It is a statement of its own because privileges are checked per
 * statement.
 */
export function setRole(who: RequestRole, statementTimeout: number | string): Statement {
  return {
    sql: who.readOnly ? SET_ROLE_READ_ONLY : SET_ROLE,
    params: [who.role, JSON.stringify(who.claims), String(statementTimeout), who.requestId ?? ""],
    sink: DISCARD,
  };
}

/** Takes the role switch's row and drops it (nobody reads it: no decoding, no objects). */
const DISCARD: RowSink = { row() {} };

/** A failed role switch means the session's role is unusable: 401, no database text. */
export function roleError(e: unknown): unknown {
  const code = (e as { code?: string }).code;
  if (code === "22023" || code === "42501" || code === "42704") {
    return new SvcError("AUTH_ROLE_INVALID", "the session's role cannot be assumed");
  }
  return e;
}
