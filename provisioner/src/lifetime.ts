/**
 * A sandbox's end of life, as both APIs set it ("end it N seconds from now": the native
 * `/timeout` route, E2B's setTimeout, connect and refresh). The Sandbox's TTL counts from its
 * creation, so the time it has lived is added.
 */
import type { Sandbox } from "./sandboxes.ts";

/** The longest a sandbox may live from its creation, whatever API asks. */
export const MAX_LIFETIME_S = 30 * 24 * 3600;

/** Seconds since the Sandbox was created (0 when the API server has not said yet). */
export function livedSeconds(s: Sandbox, now = Date.now()): number {
  const created = Date.parse(s.metadata.creationTimestamp ?? "");
  return Number.isFinite(created) ? Math.ceil(Math.max(0, now - created) / 1000) : 0;
}

/**
 * The lifecycle patch for a TTL of `ttlSeconds`: an idle timeout longer than it is shortened to
 * it (the Sandbox CRD refuses an idle timeout that outlasts the lifetime).
 */
export function lifetimePatch(
  s: Sandbox,
  ttlSeconds: number,
): { ttlSeconds: number; idleTimeoutSeconds?: number } {
  const idle = s.spec.lifecycle?.idleTimeoutSeconds;
  return {
    ttlSeconds,
    ...(idle !== undefined && idle > ttlSeconds ? { idleTimeoutSeconds: ttlSeconds } : {}),
  };
}
