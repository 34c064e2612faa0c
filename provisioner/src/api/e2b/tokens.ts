/**
 * Per-sandbox envd access tokens, as E2B issues them on create and connect.
 *
 * A token is derived, not stored: base64url(HMAC-SHA256(secret, "envd:" + the Sandbox's uid)).
 * Every replica holding the secret (SANDPIT_E2B_TOKEN_SECRET) verifies it, `connect` can hand
 * the same token out again, and nothing secret sits on the Sandbox resource. The uid, not the
 * name, goes in: a sandbox deleted and made again under the same name gets a new token, so a
 * token of the old one opens nothing.
 */
import { createHash, createHmac, timingSafeEqual } from "node:crypto";

export class EnvdTokens {
  readonly #secret: Buffer;

  constructor(secret: string) {
    this.#secret = Buffer.from(secret, "utf8");
  }

  /** The envd access token of the sandbox with this uid. */
  forUid(uid: string): string {
    return createHmac("sha256", this.#secret).update(`envd:${uid}`).digest("base64url");
  }

  /**
   * Whether `presented` is that sandbox's token. Compared in constant time, as SHA-256 digests so
   * a wrong length leaks nothing either.
   */
  matches(uid: string, presented: string | undefined): boolean {
    if (!presented) return false;
    const digest = (s: string) => createHash("sha256").update(s).digest();
    return timingSafeEqual(digest(this.forUid(uid)), digest(presented));
  }
}
