/**
 * E2B SDK errors → SandboxError. The SDK's classes (all from the `e2b` package, which
 * `@e2b/code-interpreter` re-exports) say what went wrong; transport failures arrive as plain
 * fetch/undici errors whose cause chain carries ECONNREFUSED and friends.
 * Note AuthenticationError does not extend the SDK's SandboxError, so order matters little,
 * but subclasses (SandboxNotFoundError < NotFoundError) are tested before their parents.
 */
import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  InvalidArgumentError,
  NotEnoughSpaceError,
  NotFoundError,
  RateLimitError,
  SandboxError as E2BSandboxError,
  SandboxNotFoundError,
  ServiceBusyError,
  TemplateError,
  TimeoutError,
} from "e2b";
import { SandboxError, type SandboxErrorCode } from "../../errors.ts";
import { errorText, networkErrorCode } from "../cloud-common.ts";

export function e2bErrorCode(err: unknown): SandboxErrorCode {
  if (err instanceof SandboxError) return err.code;
  if (err instanceof AuthenticationError) return "UNAUTHORIZED";
  if (err instanceof RateLimitError) return "RATE_LIMITED";
  if (
    err instanceof SandboxNotFoundError ||
    err instanceof FileNotFoundError ||
    err instanceof NotFoundError
  )
    return "NOT_FOUND";
  if (err instanceof TimeoutError) return "TIMEOUT";
  if (err instanceof InvalidArgumentError || err instanceof TemplateError)
    return "INVALID_ARGUMENT";
  if (err instanceof NotEnoughSpaceError) return "CAPACITY_EXCEEDED";
  // 503 "Service temporarily unavailable": the service cannot take us now; another provider may.
  if (err instanceof ServiceBusyError) return "CONNECTION_FAILED";
  if (err instanceof CommandExitError) return "EXECUTION_FAILED";
  if (networkErrorCode(err)) return "CONNECTION_FAILED";
  // A request deadline (AbortSignal.timeout) surfaces as a DOMException named TimeoutError.
  if (hasName(err, "TimeoutError")) return "TIMEOUT";
  if (err instanceof E2BSandboxError) {
    // The code interpreter's errors carry the status only in the message ("401 Unauthorized").
    const status = err.statusCode ?? Number(/^(\d{3}) /.exec(err.message)?.[1] ?? NaN);
    if (status === 401 || status === 403) return "UNAUTHORIZED";
    if (status === 429) return "RATE_LIMITED";
    if (status === 409) return "CONFLICT";
    // E2B's status for no room (envd's REST answers it as NotEnoughSpaceError; the code
    // interpreter's errors carry it in the message, as a context past the sandbox's limit).
    if (status === 507) return "CAPACITY_EXCEEDED";
    // A request E2B's API understood but the backend does not carry out (a self-hosted E2B
    // API refusing a feature it lacks answers 400 "... not supported ...").
    if (status === 400 && /\bnot supported\b/i.test(err.message)) return "NOT_SUPPORTED";
    if (status === 400 || status === 422) return "INVALID_ARGUMENT";
    if (status === 502 || status === 504) return "CONNECTION_FAILED";
  }
  // Connect transport failures without a status ("fetch failed", "[unknown] ...") are network.
  if (
    err instanceof Error &&
    /fetch failed|other side closed|socket hang up|terminated/i.test(err.message)
  )
    return "CONNECTION_FAILED";
  return "INTERNAL";
}

/** Wraps any E2B failure as a SandboxError naming the operation; the original is `cause`. */
export function fromE2B(err: unknown, what: string): SandboxError {
  if (err instanceof SandboxError) return err;
  const code = e2bErrorCode(err);
  const net = networkErrorCode(err);
  // A refusal names the provider (as refuseUnsupported's do), so a caller knows which backend lacks it.
  const who = code === "NOT_SUPPORTED" ? "E2B (the e2b provider's backend)" : "E2B";
  return new SandboxError(
    `${who}: ${what} failed: ${errorText(err)}${net && !errorText(err).includes(net) ? ` (${net})` : ""}`,
    code,
    err,
  );
}

/**
 * fromE2B for a call that starts something inside a sandbox (a command, a terminal). envd
 * answers a sandbox with no room for another with Connect's `resource_exhausted`, which the E2B
 * SDK raises as its RateLimitError; what it means here is the sandbox's capacity, not a rate.
 */
export function fromE2BStart(err: unknown, what: string): SandboxError {
  const mapped = fromE2B(err, what);
  if (mapped.code !== "RATE_LIMITED" || err instanceof SandboxError) return mapped;
  return new SandboxError(mapped.message, "CAPACITY_EXCEEDED", err);
}

function hasName(err: unknown, name: string): boolean {
  for (
    let e = err, i = 0;
    e && typeof e === "object" && i < 8;
    e = (e as { cause?: unknown }).cause, i++
  ) {
    if ((e as { name?: unknown }).name === name) return true;
  }
  return false;
}
