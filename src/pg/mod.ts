/**
 * svc's PostgreSQL client: connections speaking the extended query protocol with pipelined
 * batches (one write, one round trip), raw row sinks, portals, cancel, TLS and SCRAM. See
 * connection.ts for the model and README.md ("The database client") for the settings.
 *
 * @module
 */
export {
  Connection,
  type ConnectionOptions,
  type Notification,
  type Result,
  type RowSink,
  type Statement,
} from "./connection.ts";
export { Client } from "./client.ts";
export { type ConnectConfig, resolveConfig, type SslMode } from "./config.ts";
export {
  type ConnectionErrorCode,
  PgConnectionError,
  PgError,
  PgFetchTooLargeError,
  type PgFields,
  PgRowTooLargeError,
  PgSkippedError,
} from "./errors.ts";
export type { Field, Row } from "./types.ts";
