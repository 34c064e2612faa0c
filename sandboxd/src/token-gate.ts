/** The bearer token every sandboxd route but /healthz requires. */
import { createHash, timingSafeEqual } from "node:crypto";

/** Bearer-token check in constant time: both sides are hashed so lengths never differ. */
export class TokenGate {
  private digest: Buffer;
  constructor(token: string) {
    this.digest = sha256(token);
  }
  replace(token: string): void {
    this.digest = sha256(token);
  }
  accepts(header: string | undefined): boolean {
    const match = /^Bearer (.+)$/.exec(header ?? "");
    return match !== null && timingSafeEqual(sha256(match[1]!), this.digest);
  }
}

function sha256(s: string): Buffer {
  return createHash("sha256").update(s).digest();
}
