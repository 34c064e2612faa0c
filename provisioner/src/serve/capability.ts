/**
 * DeerFlow capabilities under `sandpit serve`: derived, never stored. A sandbox_url carries
 * HMAC-SHA256(serve secret, sandbox name) (256 bits, base64url), so nothing secret is written on
 * the sandbox (its labels are readable by anyone who can list containers) and a restarted serve
 * hands out the same URLs. The secret is the state directory's (./state.ts).
 */
import { createHmac } from "node:crypto";

export function capabilityFor(secret: Buffer, sandboxName: string): string {
  return createHmac("sha256", secret)
    .update(`deerflow-capability\0${sandboxName}`)
    .digest("base64url");
}
