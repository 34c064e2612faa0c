/**
 * Error answers from Sandpit's own services (sandboxd, the provisioner) as SandboxError codes.
 * Both answer `{error: {code, message}}` with the status the protocol's HTTP_STATUS gives the
 * code; an answer without that envelope (from a proxy in between, say) is read by its status,
 * through the same map read backwards.
 */
import { ERROR_CODES, HTTP_STATUS, type ErrorBody } from "@sandpit/sandboxd/wire";
import { sandboxErrorCode, type SandboxErrorCode } from "./errors.ts";

const BY_STATUS = new Map<number, SandboxErrorCode>([
  ...ERROR_CODES.map((code) => [HTTP_STATUS[code], sandboxErrorCode(code)!] as const),
  // 429 is two protocol codes and 422 a meaning of the protocol's own (EXECUTION_FAILED); a
  // Sandpit service sends them with its envelope, so bare they mean what they mean anywhere:
  // slow down, and unprocessable input.
  [429, "RATE_LIMITED"],
  [422, "INVALID_ARGUMENT"],
  // Statuses the protocol does not use, as proxies and load balancers do.
  [403, "UNAUTHORIZED"],
  [408, "TIMEOUT"],
  [503, "CONNECTION_FAILED"],
]);

/** The code of an error answer: its envelope's, when it has one, else its status's. */
export function codeForAnswer(status: number, envelopeCode?: unknown): SandboxErrorCode {
  return (
    sandboxErrorCode(envelopeCode) ??
    BY_STATUS.get(status) ??
    (status >= 400 && status < 500 ? "INVALID_ARGUMENT" : "INTERNAL")
  );
}

/** The error envelope in an answer's text, if it is one. */
export function errorEnvelope(text: string): ErrorBody | undefined {
  try {
    const error = (JSON.parse(text) as { error?: Partial<ErrorBody> } | null)?.error;
    return typeof error?.code === "string" && typeof error.message === "string"
      ? (error as ErrorBody)
      : undefined;
  } catch {
    return undefined; // not JSON: not our envelope
  }
}
