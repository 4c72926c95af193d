/**
 * Which PostgreSQL errors a client can cause and which only svc's own SQL can: the fuzzers and
 * property tests fail on the latter whatever status they were answered with.
 */

/**
 * Class 42 SQLSTATEs a client's values can cause, answered 4xx: a privilege denial (42501, the
 * database's decision), an object named by a client value that does not exist (42704: a text
 * search configuration, a reg* argument), operand types that do not fit an operator or function
 * (42883, 42804, 42846, 42725) and writing a generated column (428C9). Every other class 42 error
 * (42601 syntax, 42P01/42703/42P02 undefined table, column, parameter, 42P18, 42803, …) means svc
 * wrote SQL it should not have.
 */
export const CLIENT_CLASS_42 = new Set([
  "42501",
  "42704",
  "42883",
  "42804",
  "42846",
  "42725",
  "428C9",
]);

/**
 * Whether `code` can only come from svc's own SQL: class 42 outside {@link CLIENT_CLASS_42},
 * 0A000 (feature not supported) and XX000 (internal error). With the error `message` (when there
 * is one), a 42601 raised by an input function for a bad value (`syntax error in tsquery`) is the
 * client's, not a syntax error of the statement (those say `syntax error at …`).
 */
export function svcOwnSqlState(code: string, message?: string): boolean {
  if (code === "0A000" || code === "XX000") return true;
  if (!code.startsWith("42") || CLIENT_CLASS_42.has(code)) return false;
  if (code === "42601" && message !== undefined) {
    return /^syntax error at|delimited identifier|unterminated/.test(message);
  }
  return true;
}
