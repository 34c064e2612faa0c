/** The bearer token every sandboxd route but /healthz requires. */
import { createHash, timingSafeEqual } from "node:crypto";
import { bearerCredential } from "./wire.ts";

/**
 * Bearer-token check in constant time: both sides are hashed so lengths never differ. Without a
 * token (SANDBOXD_AIO_NO_AUTH with none set) nothing is accepted.
 */
export class TokenGate {
  private digest: Buffer | null;
  /** The token, or its SHA-256 (`{sha256: hex}`): all the gate keeps is the digest. */
  constructor(token: string | { sha256: string } | null) {
    this.digest =
      token === null
        ? null
        : typeof token === "string"
          ? sha256(token)
          : Buffer.from(token.sha256, "hex");
  }
  replace(token: string): void {
    this.digest = sha256(token);
  }
  accepts(header: string | undefined): boolean {
    const credential = bearerCredential(header);
    return (
      credential !== undefined &&
      this.digest !== null &&
      timingSafeEqual(sha256(credential), this.digest)
    );
  }
}

function sha256(s: string): Buffer {
  return createHash("sha256").update(s).digest();
}
