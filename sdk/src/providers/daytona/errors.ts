/**
 * Daytona SDK errors → SandboxError. The SDK turns HTTP statuses into classes (404 →
 * DaytonaNotFoundError, 429 → DaytonaRateLimitError, ...) and transport failures into
 * DaytonaConnectionError; subclasses are tested before their parents.
 */
import {
  DaytonaAuthenticationError,
  DaytonaBadGatewayError,
  DaytonaBadRequestError,
  DaytonaConflictError,
  DaytonaConnectionError,
  DaytonaConnectionTimeoutError,
  DaytonaError,
  DaytonaForbiddenError,
  DaytonaGoneError,
  DaytonaInternalServerError,
  DaytonaNotFoundError,
  DaytonaRateLimitError,
  DaytonaServiceUnavailableError,
  DaytonaTimeoutError,
  DaytonaUnprocessableEntityError,
} from "@daytonaio/sdk";
import { SandboxError, type SandboxErrorCode } from "../../errors.ts";
import { errorText, networkErrorCode } from "../cloud-common.ts";

export function daytonaErrorCode(err: unknown): SandboxErrorCode {
  if (err instanceof SandboxError) return err.code;
  if (err instanceof DaytonaAuthenticationError || err instanceof DaytonaForbiddenError)
    return "UNAUTHORIZED";
  if (err instanceof DaytonaRateLimitError) return "RATE_LIMITED";
  if (err instanceof DaytonaNotFoundError || err instanceof DaytonaGoneError) return "NOT_FOUND";
  // A client-side deadline: the service did not answer in time (a subclass of ConnectionError).
  if (err instanceof DaytonaConnectionTimeoutError || err instanceof DaytonaTimeoutError)
    return "TIMEOUT";
  if (err instanceof DaytonaConnectionError) return "CONNECTION_FAILED";
  if (err instanceof DaytonaBadRequestError || err instanceof DaytonaUnprocessableEntityError)
    return "INVALID_ARGUMENT";
  if (err instanceof DaytonaConflictError) return "CONFLICT";
  if (err instanceof DaytonaServiceUnavailableError || err instanceof DaytonaBadGatewayError)
    return "CONNECTION_FAILED";
  if (err instanceof DaytonaInternalServerError) return "INTERNAL";
  if (networkErrorCode(err)) return "CONNECTION_FAILED";
  if (err instanceof DaytonaError) {
    const status = err.statusCode;
    if (status === 401 || status === 403) return "UNAUTHORIZED";
    if (status === 404) return "NOT_FOUND";
    if (status === 408 || status === 504) return "TIMEOUT";
    if (status === 429) return "RATE_LIMITED";
  }
  return "INTERNAL";
}

/** Wraps any Daytona failure as a SandboxError naming the operation; the original is `cause`. */
export function fromDaytona(err: unknown, what: string): SandboxError {
  if (err instanceof SandboxError) return err;
  const net = networkErrorCode(err);
  const text = errorText(err) || (err instanceof Error ? err.name : "unknown error");
  return new SandboxError(
    `Daytona: ${what} failed: ${text}${net && !text.includes(net) ? ` (${net})` : ""}`,
    daytonaErrorCode(err),
    err,
  );
}
