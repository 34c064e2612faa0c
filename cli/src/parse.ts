/** Parsers for option values: each throws a usage error that names the bad value. */
import { usageError } from "./exit.ts";

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `90s`, `15m`, `2h`, `1d`, or plain milliseconds. */
export function parseDuration(value: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(value.trim());
  if (!m)
    throw usageError(`invalid duration ${JSON.stringify(value)}: use e.g. 500ms, 30s, 15m, 2h`);
  const ms = Math.round(Number(m[1]) * UNITS[m[2] ?? "ms"]!);
  if (ms <= 0) throw usageError(`duration ${JSON.stringify(value)} must be positive`);
  return ms;
}

/** Collects repeated `KEY=VALUE` options into a record (commander's option reducer). */
export function collectPair(value: string, previous: Record<string, string> = {}) {
  const i = value.indexOf("=");
  if (i <= 0) throw usageError(`expected KEY=VALUE, got ${JSON.stringify(value)}`);
  return { ...previous, [value.slice(0, i)]: value.slice(i + 1) };
}

/** Collects repeated options (and comma-separated lists) into one array. */
export function collectList(value: string, previous: string[] = []): string[] {
  return [...previous, ...value.split(",").filter(Boolean)];
}

export function parsePort(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 65535)
    throw usageError(`invalid port ${JSON.stringify(value)}: use 1-65535`);
  return n;
}

export function parsePid(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) throw usageError(`invalid pid ${JSON.stringify(value)}`);
  return n;
}

export function parseOffset(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0)
    throw usageError(`invalid offset ${JSON.stringify(value)}: a byte count, 0 or more`);
  return n;
}

/**
 * The command `exec` runs: one argument is shell text as written (`'ls | wc -l'`); several are an
 * argv, each quoted so the shell passes it through unchanged (`ls -la "my file"`).
 */
export function commandText(argv: string[]): string {
  if (argv.length === 1) return argv[0]!;
  return argv.map(shellQuote).join(" ");
}

export function shellQuote(arg: string): string {
  if (/^[A-Za-z0-9_./:=@%+-]+$/.test(arg)) return arg;
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}
