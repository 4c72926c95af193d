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
import { prettyFormatter } from "@logtape/pretty";

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
  const base = cfg.handler === "json" ? jsonLinesFormatter : prettyFormatter;
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
