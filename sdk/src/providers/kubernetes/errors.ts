/** The provisioner's error answers as SandboxErrors. */
import { SandboxError } from "../../errors.ts";
import { codeForAnswer, errorEnvelope } from "../../http-errors.ts";

/**
 * A provisioner that fails inside (INTERNAL) cannot serve this call, as if it were unreachable:
 * CONNECTION_FAILED, so a fallback chain moves on to its next provider.
 */
export function provisionerError(status: number, body: string, what: string): SandboxError {
  const envelope = errorEnvelope(body);
  const message = envelope?.message ?? body.slice(0, 500);
  const code = codeForAnswer(status, envelope?.code);
  // What the provisioner cannot do names the provider too, as every NOT_SUPPORTED does (a
  // fallback chain's caller learns which provider lacks it).
  const via = code === "NOT_SUPPORTED" ? " with the kubernetes provider" : "";
  return new SandboxError(
    `${what}${via}: ${message || `HTTP ${status}`}`,
    code === "INTERNAL" ? "CONNECTION_FAILED" : code,
  );
}
