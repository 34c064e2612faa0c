/**
 * Per-sandbox envd access tokens, as E2B issues them on create and connect.
 *
 * A token is derived, not stored: base64url(HMAC-SHA256(secret, "envd:" + the Sandbox's uid)).
 * Every replica holding the secret (SANDPIT_E2B_TOKEN_SECRET) verifies it, `connect` can hand
 * the same token out again, and nothing secret sits on the Sandbox resource. The uid, not the
 * name, goes in: a sandbox deleted and made again under the same name gets a new token, so a
 * token of the old one opens nothing.
 *
 * The same derivation with "traffic:" gives the traffic access token, which the code
 * interpreter SDKs send (as E2B-Traffic-Access-Token) on the /contexts calls that carry no
 * envd token: it opens the code interpreter's port and nothing else.
 */
import { createHash, createHmac, timingSafeEqual } from "node:crypto";

export type TokenKind = "envd" | "traffic";

export class EnvdTokens {
  readonly #secret: Buffer;

  constructor(secret: string) {
    this.#secret = Buffer.from(secret, "utf8");
  }

  /** The envd (or traffic) access token of the sandbox with this uid. */
  forUid(uid: string, kind: TokenKind = "envd"): string {
    return createHmac("sha256", this.#secret).update(`${kind}:${uid}`).digest("base64url");
  }

  /**
   * Whether `presented` is that sandbox's token. Compared in constant time, as SHA-256 digests so
   * a wrong length leaks nothing either.
   */
  matches(uid: string, presented: string | undefined, kind: TokenKind = "envd"): boolean {
    if (!presented) return false;
    const digest = (s: string) => createHash("sha256").update(s).digest();
    return timingSafeEqual(digest(this.forUid(uid, kind)), digest(presented));
  }
}
