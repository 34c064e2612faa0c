/**
 * Warm-pod reservations, the vocabulary the provisioner and the operator share for the warm
 * fast path (docs/architecture.md, "The warm create"): a provisioner replica reserves warm pods
 * ahead of demand and hands one to a create by naming it on the Sandbox; the operator never
 * adopts a pod reserved by a live holder, completes the adoption of a pod a Sandbox names, and
 * reclaims reservations whose holder is gone. Both derive the sandbox's token from its uid, so
 * the provisioner can answer before the operator has written the token Secret, and a warm pod's
 * own token from its name and token id, so no Secret holds it.
 */
import { createHash, createHmac } from "node:crypto";
import type { KObject, Resource } from "../kube/rest.ts";

export const RESERVATION = {
  /** On a warm pod, and on the Sandbox it was handed to: the holder's Lease name. */
  holder: "sandpit.dev/reserved-by",
  /** On a Sandbox: the reserved warm pod the provisioner initialised for it. */
  pod: "sandpit.dev/reserved-pod",
  /** On a holder's Lease: what it is (the operator lists holders by it). */
  leaseLabel: "sandpit.dev/reservation-holder",
} as const;

/**
 * The Secret (in the sandbox namespace, made by the operator) holding the key sandbox tokens of
 * reserved pods and warm pods' tokens are derived from. Never mounted into any pod
 * (docs/security.md).
 */
export const TOKEN_KEY_SECRET = "sandpit-token-key";

export const LEASES: Resource = {
  group: "coordination.k8s.io",
  version: "v1",
  plural: "leases",
  kind: "Lease",
};

export interface Lease extends KObject {
  spec?: { holderIdentity?: string; leaseDurationSeconds?: number; renewTime?: string };
}

/** A sandbox's token, from the key and its uid: the same on the provisioner and the operator. */
export function derivedToken(key: string, sandboxUid: string): string {
  return createHmac("sha256", key).update(`sandbox-token\0${sandboxUid}`).digest("hex");
}

/**
 * A warm pod's own token: derived from the same key, its namespace, its name and the random id
 * it was made with (the pod's ANNOTATION.warmTokenId), so the provisioner and the operator both
 * know it without a Secret per pod, the pod is given its SHA-256 only, and it opens that one
 * pod: a pod made again under the same name gets another id, so another token.
 */
export function warmPodToken(
  key: string,
  namespace: string,
  podName: string,
  tokenId: string,
): string {
  return createHmac("sha256", key)
    .update(`warm\0${namespace}\0${podName}\0${tokenId}`)
    .digest("hex");
}

/**
 * Names a token key without revealing it (the first 16 hex digits of its SHA-256): a warm pod
 * carries the fingerprint of the key its token was derived from.
 */
export function keyFingerprint(key: string): string {
  return createHash("sha256").update(key).digest("hex").slice(0, 16);
}

/**
 * Whether a holder may still be handing out its reserved pods: its Lease was renewed within
 * twice its duration. A replica stops handing out pods half a Lease after its last renewal was
 * sent; the second duration is the margin for a create it sent just before to land and reach
 * every cache, so a pod a new Sandbox names is never given back under it. A missing or deleted
 * Lease is a holder gone (a replica shutting down releases its pods before deleting it).
 */
export function leaseAlive(lease: Lease | undefined, nowMs: number): boolean {
  const renewed = Date.parse(lease?.spec?.renewTime ?? "");
  const duration = lease?.spec?.leaseDurationSeconds;
  return (
    !!lease &&
    !lease.metadata.deletionTimestamp &&
    !!duration &&
    renewed + 2 * duration * 1000 > nowMs
  );
}

const FAULT_AT = process.env.SANDPIT_FAULT_AT;

/**
 * A named crash point of the fast path, for the invariant tests
 * (test/provisioner/fastpath.test.ts): with SANDPIT_FAULT_AT=<step> the process SIGKILLs itself
 * on reaching that step. Read once at start; production pays one string comparison per step.
 */
export function faultPoint(step: string): void {
  if (FAULT_AT === step) process.kill(process.pid, "SIGKILL");
}

const [FAIL_AT, FAIL_TIMES] = (process.env.SANDPIT_FAULT_FAIL ?? "").split("=");
let failsLeft = Number(FAIL_TIMES) || 0;

/**
 * A named point where a call that succeeded is made to look failed (SANDPIT_FAULT_FAIL=<step>=<n>:
 * the first n times the step is reached it throws): an answer lost on its way back, which leaves
 * the caller not knowing whether its write happened.
 */
export function faultFail(step: string): void {
  if (FAIL_AT === step && failsLeft > 0) {
    failsLeft--;
    throw new Error(`injected fault: the answer at ${step} was lost`);
  }
}

const [STALL_AT, STALL_MS] = (process.env.SANDPIT_FAULT_STALL ?? "").split("=");

/**
 * A named point where the process may be made slow instead (SANDPIT_FAULT_STALL=<step>=<ms>):
 * the other side's view of the same sandbox then moves first, an order a test cannot otherwise
 * force.
 */
export async function faultStall(step: string): Promise<void> {
  if (STALL_AT === step) await new Promise((resolve) => setTimeout(resolve, Number(STALL_MS)));
}
