/**
 * The markers svc's own SQL raises its refusals with (a row over `pg.query.max_row_size`,
 * src/compile/rowsize.ts; a write's check failing, src/write/compile.ts): a cast of marked text
 * to an integer fails, and the error text, carrying the marker, says which refusal it was. A
 * request can make PostgreSQL fail the same way (a cast of its own text), so the markers hold a
 * secret drawn per process, and every SQL text or plan svc shows a client (`sql`, `query_plan`)
 * has it replaced ({@link redactMarkers}): a request cannot write a marker it never saw.
 *
 * @module
 */

const SECRET = crypto.randomUUID().replaceAll("-", "").slice(0, 16);

/** Marks the failure of a row over the size cap: `<marker><size>`. */
export const ROW_TOO_LARGE_MARKER = `svc:row_too_large:${SECRET}:`;

/** Marks the failure of a write's check: `<marker>:<check>:<row>`. */
export const WRITE_CHECK_MARKER = `svc-write-check-${SECRET}`;

/** `text` (SQL, a plan, an envelope as JSON) with the markers' secret replaced. */
export function redactMarkers(text: string): string {
  return text.includes(SECRET) ? text.replaceAll(SECRET, "private") : text;
}
