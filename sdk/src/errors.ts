/**
 * The one error type every provider throws. The first five codes are the Jinba `sandbox-core`
 * codes and keep their meaning; the rest are compatible additions for input, auth and capacity.
 */
export type SandboxErrorCode =
  | "CONNECTION_FAILED" // the provider (daemon, service, sandbox agent) could not be reached
  | "TIMEOUT" // the operation or the code ran past its deadline
  | "NOT_FOUND" // no such sandbox (on resume), file or directory
  | "EXECUTION_FAILED" // the sandbox could not run what was asked (e.g. a package install failed)
  | "INTERNAL" // an unexpected failure inside Sandpit or the provider
  | "INVALID_ARGUMENT" // bad input: a path outside the sandbox, an unknown language, bad config
  | "UNAUTHORIZED" // missing or wrong credentials
  | "CONFLICT" // the target is in the wrong state (a directory where a file was expected, ...)
  | "CAPACITY_EXCEEDED" // the pool or account is at its cap
  | "RATE_LIMITED"; // the provider asked us to slow down

export class SandboxError extends Error {
  readonly code: SandboxErrorCode;
  override readonly cause?: unknown;

  constructor(message: string, code: SandboxErrorCode, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "SandboxError";
    this.code = code;
    this.cause = cause;
  }
}

export function isSandboxError(err: unknown, code?: SandboxErrorCode): err is SandboxError {
  return err instanceof SandboxError && (code === undefined || err.code === code);
}
