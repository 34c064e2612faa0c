/**
 * The one error type every provider throws. Its codes are the Sandpit protocol's
 * (`ERROR_CODES` in @sandpit/sandboxd/protocol), so a code means the same in the SDK as on the
 * wire. The first five are the Jinba `sandbox-core` codes and keep their meaning; the rest are
 * compatible additions for input, auth and capacity:
 *
 * - CONNECTION_FAILED: the provider (daemon, service, sandbox agent) could not be reached
 * - TIMEOUT: the operation or the code ran past its deadline
 * - NOT_FOUND: no such sandbox (on resume), file or directory
 * - EXECUTION_FAILED: the sandbox could not run what was asked (e.g. a package install failed)
 * - INTERNAL: an unexpected failure inside Sandpit or the provider
 * - INVALID_ARGUMENT: bad input: a path outside the sandbox, an unknown language, bad config
 * - UNAUTHORIZED: missing or wrong credentials
 * - CONFLICT: the target is in the wrong state (a directory where a file was expected, ...)
 * - CAPACITY_EXCEEDED: the pool or account is at its cap
 * - RATE_LIMITED: the provider asked us to slow down
 * - NOT_SUPPORTED: this provider cannot do what was asked (the message names the feature; the
 *   capability table in sdk/README.md lists which provider does what)
 */
import { ERROR_CODES, type ErrorCode } from "@sandpit/sandboxd/wire";

/**
 * Protocol codes an SDK user never sees, and the code they surface as: a body too large is bad
 * input, and a sandbox the provisioner could not reach is, to the caller, one not reached.
 */
const SURFACED_AS = {
  PAYLOAD_TOO_LARGE: "INVALID_ARGUMENT",
  UPSTREAM_UNAVAILABLE: "CONNECTION_FAILED",
} as const satisfies Partial<Record<ErrorCode, ErrorCode>>;

export type SandboxErrorCode = Exclude<ErrorCode, keyof typeof SURFACED_AS>;

/** The SandboxError code for a protocol code, or undefined for a code the protocol lacks. */
export function sandboxErrorCode(code: unknown): SandboxErrorCode | undefined {
  if (!(ERROR_CODES as readonly unknown[]).includes(code)) return undefined;
  const c = code as ErrorCode;
  return c in SURFACED_AS ? SURFACED_AS[c as keyof typeof SURFACED_AS] : (c as SandboxErrorCode);
}

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
