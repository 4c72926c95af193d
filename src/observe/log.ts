/**
 * Structured logging with LogTape: `logging.handler` pretty|json, `logging.level`, and per-attribute
 * `logging.filter.<attr>` (must match when present) / `logging.exclude.<attr>` (suppress on match).
 */
import {
  configureSync,
  getConsoleSink,
  getLogger,
  jsonLinesFormatter,
  type Logger,
  type LogRecord,
  resetSync,
} from "@logtape/logtape";
import { getPrettyFormatter, prettyFormatter } from "@logtape/pretty";

/** The service's root logger (category `svc`). */
export const log: Logger = getLogger(["svc"]);

/** Builds the attribute filter of `logging.filter.*` and `logging.exclude.*`. */
export function attributeFilter(
  filter: Record<string, string>,
  exclude: Record<string, string>,
): (r: LogRecord) => boolean {
  const inc = Object.entries(filter).map(([k, v]) => [k, new RegExp(v)] as const);
  const exc = Object.entries(exclude).map(([k, v]) => [k, new RegExp(v)] as const);
  return (r) => {
    for (const [k, re] of inc) {
      const v = r.properties[k];
      if (v !== undefined && !re.test(String(v))) return false;
    }
    for (const [k, re] of exc) {
      const v = r.properties[k];
      if (v !== undefined && re.test(String(v))) return false;
    }
    return true;
  };
}

/**
 * The longest string value the pretty formatter gets whole. Its line wrapping costs time growing
 * with the square of a value's length (measured: an 8 KB request path, 2.2 s of a blocked event
 * loop), and a client chooses some of the values logged (paths, names in error messages).
 */
export const PRETTY_VALUE_MAX = 256;

function shorten(text: string): string {
  if (text.length <= PRETTY_VALUE_MAX) return text;
  return `${text.slice(0, PRETTY_VALUE_MAX)}… (${text.length - PRETTY_VALUE_MAX} more characters)`;
}

/** A value as the pretty formatter may take it: a long string, or an object showing as one, cut. */
function fit(v: unknown): unknown {
  if (typeof v === "string") return shorten(v);
  if (v === null || typeof v !== "object") return v;
  const shown = Deno.inspect(v, { colors: false, depth: 4 });
  return shown.length > PRETTY_VALUE_MAX ? shorten(shown) : v;
}

/** The pretty format: monochrome when `NO_COLOR` is set (no-color.org), as Deno's own output is. */
const pretty = Deno.noColor ? getPrettyFormatter({ colors: false }) : prettyFormatter;

/** The pretty formatter, given values that show in at most {@link PRETTY_VALUE_MAX} characters. */
function prettyLine(r: LogRecord): string {
  const properties: Record<string, unknown> = {};
  for (const k in r.properties) properties[k] = fit(r.properties[k]);
  return pretty({ ...r, message: r.message.map(fit), properties });
}

/** The `logging` section of the configuration (the keys `logging.*`). */
export interface LoggingOptions {
  handler: "pretty" | "json";
  level: "debug" | "info" | "warn" | "error";
  filter: Record<string, string>;
  exclude: Record<string, string>;
}

/**
 * Configures logging from the `logging` section (idempotent). `context` is added to every record
 * (a worker adds `{worker: n}` so the lines of one process can be told apart).
 */
export function configureLogging(
  cfg: LoggingOptions,
  context?: Record<string, unknown>,
): void {
  resetSync();
  const base = cfg.handler === "json" ? jsonLinesFormatter : prettyLine;
  const formatter = context
    ? (r: LogRecord) => base({ ...r, properties: { ...r.properties, ...context } })
    : base;
  configureSync({
    sinks: { console: getConsoleSink({ formatter }) },
    filters: { attrs: attributeFilter(cfg.filter, cfg.exclude) },
    loggers: [
      {
        category: ["svc"],
        lowestLevel: cfg.level === "warn" ? "warning" : cfg.level,
        sinks: ["console"],
        filters: ["attrs"],
      },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: ["console"] },
    ],
  });
}
