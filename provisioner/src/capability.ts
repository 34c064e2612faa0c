/**
 * DeerFlow capabilities: the secret in a sandbox_url's path, which DeerFlow's client sends
 * instead of any credential. Derived, never stored: HMAC-SHA256(the capability key, the
 * Sandbox's uid), 256 bits in base64url. Nothing that opens a sandbox is written on it (its
 * annotations are readable by anyone who can read Sandboxes, a container's labels by anyone
 * who can list containers), every replica derives the same URL, a restart hands out the same
 * ones, and a Sandbox made again under the same name gets a new one.
 *
 * Only sandboxes made through the DeerFlow API have one (its id annotation marks them): no
 * capability opens a sandbox made through the native or E2B API.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import type { Sandbox } from "@sandpit/operator/api";
import { EXTERNAL_ID_ANNOTATION } from "./sandboxes.ts";

export function capabilityOf(key: Buffer, s: Sandbox): string | undefined {
  if (s.metadata.annotations?.[EXTERNAL_ID_ANNOTATION] === undefined || !s.metadata.uid) {
    return undefined;
  }
  return createHmac("sha256", key)
    .update(`deerflow-capability\0${s.metadata.uid}`)
    .digest("base64url");
}

/** Whether `given` is `s`'s capability (constant-time comparison). */
export function capabilityMatches(key: Buffer, s: Sandbox, given: string): boolean {
  const expected = capabilityOf(key, s);
  if (!expected) return false;
  const a = Buffer.from(expected);
  const b = Buffer.from(given);
  return a.length === b.length && timingSafeEqual(a, b);
}
