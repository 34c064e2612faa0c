/**
 * How the sandpit command fails: one line on stderr (`sandpit: <message>`) and an exit code that
 * says whose fault it was. No stack trace unless SANDPIT_DEBUG=1.
 */

/** Exit codes, documented in cli/README.md. */
export const EXIT = {
  OK: 0,
  /** The sandbox, the provider or the machine failed (not found, unreachable, refused, ...). */
  RUNTIME: 1,
  /** The command line was wrong: unknown command or flag, a bad value, a missing argument. */
  USAGE: 2,
  /** Interrupted by Ctrl-C (128 + SIGINT), as shells report it. */
  INTERRUPTED: 130,
} as const;

/** An error the CLI raises itself, with the exit code it means. */
export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode: number = EXIT.RUNTIME) {
    super(message);
    this.name = "CliError";
    this.exitCode = exitCode;
  }
}

export function usageError(message: string): CliError {
  return new CliError(message, EXIT.USAGE);
}

/** Multi-line messages (a config with several problems) become one line. */
export function oneLine(message: string): string {
  return message
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean)
    .join("; ");
}

export function debugEnabled(): boolean {
  return process.env.SANDPIT_DEBUG === "1";
}

/** Prints the error as the CLI's one line and returns the exit code it maps to. */
export function reportError(err: unknown): number {
  const code = err instanceof CliError ? err.exitCode : errorExitCode(err);
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(`sandpit: ${oneLine(message) || "unknown error"}\n`);
  if (debugEnabled() && err instanceof Error && err.stack) process.stderr.write(`${err.stack}\n`);
  return code;
}

/** SDK errors about the caller's input are usage errors; everything else failed at run time. */
function errorExitCode(err: unknown): number {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "INVALID_ARGUMENT" ? EXIT.USAGE : EXIT.RUNTIME;
}

/** A command's exit status as a process exit code (0-255); out-of-range statuses are failures. */
export function processExitCode(status: number): number {
  return Number.isInteger(status) && status >= 0 && status <= 255 ? status : EXIT.RUNTIME;
}
