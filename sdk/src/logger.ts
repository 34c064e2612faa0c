/**
 * The logger the SDK writes to: any object with pino's call shape (`logger.warn({ err }, "msg")`,
 * `logger.child({ provider })`), so a pino logger, or anything that looks like one, can be passed
 * to `createProvider(config, { logger })` without the SDK depending on pino.
 *
 * With no logger passed the SDK stays quiet: warnings and errors go to stderr as one line each,
 * never to stdout, where they would corrupt a CLI's output or a stdio protocol (MCP, say).
 * SANDPIT_LOG_LEVEL (debug, info, warn, error, silent) moves that threshold.
 */

/** One log call: pino's `(fields, message)` or `(message)`. */
export interface LogFn {
  (fields: object, message?: string): void;
  (message: string): void;
}

export interface Logger {
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
  /** A logger that adds `bindings` to every line. */
  child(bindings: Record<string, unknown>): Logger;
}

const LEVELS = ["debug", "info", "warn", "error", "silent"] as const;
type Level = (typeof LEVELS)[number];

function levelFromEnv(value: string | undefined): Level {
  return (LEVELS as readonly string[]).includes(value ?? "") ? (value as Level) : "warn";
}

/** Fields rendered for a line: an Error becomes its message, the rest JSON. */
function render(fields: Record<string, unknown>): string {
  const out = Object.entries(fields).map(([k, v]) => {
    const value = v instanceof Error ? v.message : v;
    return `${k}=${typeof value === "string" ? value : JSON.stringify(value)}`;
  });
  return out.length ? ` (${out.join(", ")})` : "";
}

/** The default: lines at `level` and above to stderr, `sandpit <level>: message (fields)`. */
export function stderrLogger(
  level: Level = levelFromEnv(process.env.SANDPIT_LOG_LEVEL),
  bindings: Record<string, unknown> = {},
): Logger {
  const threshold = LEVELS.indexOf(level);
  const at =
    (name: Exclude<Level, "silent">): LogFn =>
    (a: object | string, message?: string) => {
      if (LEVELS.indexOf(name) < threshold) return;
      const [fields, msg] = typeof a === "string" ? [{}, a] : [a, message ?? ""];
      process.stderr.write(`sandpit ${name}: ${msg}${render({ ...bindings, ...fields })}\n`);
    };
  return {
    debug: at("debug"),
    info: at("info"),
    warn: at("warn"),
    error: at("error"),
    child: (more) => stderrLogger(level, { ...bindings, ...more }),
  };
}
