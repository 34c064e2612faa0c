/**
 * sandboxd's log: one JSON line per record on stderr, written synchronously, in pino's format
 * (`{"level":30,"time":...,"pid":...,"hostname":...,<fields>,"msg":...}`, an `err` field as pino's
 * standard serializer gives it: type, message and stack with their causes, and its own fields),
 * so what reads sandboxd's logs reads them as before.
 *
 * Not pino: sandboxd logs a handful of rare events, and pino with its streams and workers was
 * 6 ms of a fresh sandboxd's 75 ms of start-up CPU and 1.5 MiB of its idle memory
 * (bench/RESULTS.md, "A lean sandboxd"). Anything with pino's call shape can still be passed to
 * startSandboxd (the tests pass pino loggers).
 */
import { hostname } from "node:os";

/** The calls sandboxd makes; a pino logger has them. */
export interface Logger {
  fatal(fields: object, msg: string): void;
  error(fields: object, msg: string): void;
  warn(fields: object, msg: string): void;
  info(fields: object, msg: string): void;
  debug(fields: object, msg: string): void;
  trace(fields: object, msg: string): void;
}

export const LEVELS = {
  trace: 10,
  debug: 20,
  info: 30,
  warn: 40,
  error: 50,
  fatal: 60,
  silent: Infinity,
} as const;
export type LevelName = keyof typeof LEVELS;

/** A logger writing records at `level` and above to `write` (stderr by default). */
export function createLogger(
  level: LevelName,
  write: (line: string) => void = (line) => void process.stderr.write(line),
): Logger {
  const min = LEVELS[level];
  const base = `"pid":${process.pid},"hostname":${JSON.stringify(hostname())}`;
  const at =
    (n: number) =>
    (fields: object, msg: string): void => {
      if (n < min) return;
      let body: string;
      try {
        body = JSON.stringify(fields, replacer);
      } catch {
        body = JSON.stringify({ fields: "[unserialisable]" });
      }
      const rest = body === "{}" ? "" : `,${body.slice(1, -1)}`;
      write(`{"level":${n},"time":${Date.now()},${base}${rest},"msg":${JSON.stringify(msg)}}\n`);
    };
  return {
    trace: at(LEVELS.trace),
    debug: at(LEVELS.debug),
    info: at(LEVELS.info),
    warn: at(LEVELS.warn),
    error: at(LEVELS.error),
    fatal: at(LEVELS.fatal),
  };
}

/** An `err` field as pino's serializer gives it; BigInts as strings. */
function replacer(this: unknown, key: string, value: unknown): unknown {
  if (key === "err" && isErrorLike(value)) return serializeError(value, new Set());
  if (typeof value === "bigint") return value.toString();
  return value;
}

interface ErrorLike {
  message: string;
  stack?: unknown;
  cause?: unknown;
  errors?: unknown;
  [key: string]: unknown;
}

function isErrorLike(v: unknown): v is ErrorLike {
  return typeof v === "object" && v !== null && typeof (v as ErrorLike).message === "string";
}

function serializeError(err: ErrorLike, seen: Set<object>): Record<string, unknown> {
  seen.add(err);
  const out: Record<string, unknown> = {
    type: typeof err.constructor === "function" ? err.constructor.name : err.name,
    message: withCauses(err, (e) => e.message, ": "),
    stack: withCauses(err, (e) => (typeof e.stack === "string" ? e.stack : ""), "\ncaused by: "),
  };
  if (Array.isArray(err.errors))
    out.aggregateErrors = err.errors.map((e: unknown) =>
      isErrorLike(e) ? serializeError(e, seen) : e,
    );
  for (const key in err) {
    if (out[key] !== undefined) continue;
    const v = err[key];
    // Error-like causes are in the message and stack already.
    if (isErrorLike(v)) {
      if (key !== "cause" && !seen.has(v)) out[key] = serializeError(v, seen);
    } else out[key] = v;
  }
  return out;
}

/** `part` of the error and of each of its causes, joined by `sep`. */
function withCauses(err: ErrorLike, part: (e: ErrorLike) => string, sep: string): string {
  const seen = new Set<object>();
  let text = part(err);
  let e: ErrorLike = err;
  while (isErrorLike(e.cause)) {
    if (seen.has(e)) return `${text}${sep}...`;
    seen.add(e);
    e = e.cause;
    text += sep + part(e);
  }
  return text;
}
