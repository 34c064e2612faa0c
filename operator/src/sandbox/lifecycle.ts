/**
 * The lifecycle decisions of a sandbox: when it sleeps, wakes, waits, gives up or is Ready, and
 * what its status and events say about it. Everything here reads the sandbox, its pod and the
 * clock and records the outcome in the status builder; the reconciler makes the writes.
 */
import { SANDBOXD_PORT } from "@sandpit/sandboxd/protocol";
import { dataClaimName } from "../api/names.ts";
import type { Sandbox, SandboxPool } from "../api/v1alpha1.ts";
import type { ReconcileResult } from "../controller/controller.ts";
import type { Ctx } from "../context.ts";
import { CORE_EVENTS, type CoreEvent, type Pod } from "../kube/resources.ts";
import type { KObject } from "../kube/rest.ts";
import { sandboxReadySeconds, sandboxTransitions } from "../metrics.ts";
import {
  type Failure,
  lastRestart,
  podEnd,
  podProblem,
  restartCount,
  statusExplains,
} from "../workload/pod-state.ts";
import type { Effective } from "../workload/spec.ts";
import type { Adoption, PoolMembership } from "./membership.ts";
import type { SandboxStatusBuilder } from "./status.ts";

export const READY_REASON = "SandboxdServing";
export const READY_MESSAGE = "sandboxd answers on its endpoint";
/** Starting is reported in status only once it has taken this long (saves writes). */
export const QUIET_START_MS = 3_000;
/** Pods recreated after failing wait 1 s, 2 s, 4 s ... up to this. */
const MAX_RECREATE_BACKOFF_MS = 60_000;

export interface Suspension {
  reason: "UserRequested" | "IdleTimeout" | "Evicted";
  message: string;
}

/** Whether the sandbox should sleep now, and why. */
export function suspensionOf(
  pools: PoolMembership,
  sbx: Sandbox,
  eff: Effective,
  st: SandboxStatusBuilder,
  now: number,
): Suspension | undefined {
  if (eff.suspended)
    return {
      reason: "UserRequested",
      message: "spec.lifecycle.suspended is true; the volume is kept",
    };
  const lastActivity = Date.parse(sbx.status?.lastActivityTime ?? "") || 0;
  const suspended = st.conditionOf("Suspended");
  // The eviction is durable once the cache shows it; until then the pool's mark stands, so a
  // reconcile on a stale cache cannot take the slot back.
  const shown = suspended?.status === "True" && suspended.reason === "Evicted";
  if (pools.evicting(sbx, shown)) {
    return {
      reason: "Evicted",
      message: `the pool reached maxActive and this was its least recently active sandbox; activity resumes it`,
    };
  }
  if (
    suspended?.status === "True" &&
    (suspended.reason === "IdleTimeout" || suspended.reason === "Evicted")
  ) {
    // Suspended by the operator: stays so until activity is reported after the suspension.
    if (lastActivity <= Date.parse(suspended.lastTransitionTime)) {
      return { reason: suspended.reason, message: suspended.message };
    }
    return undefined;
  }
  if (eff.idleTimeoutSeconds && st.phase === "Ready") {
    const since = Math.max(lastActivity, Date.parse(st.current.readyAt ?? st.now));
    if (now - since >= eff.idleTimeoutSeconds * 1000) {
      return {
        reason: "IdleTimeout",
        message: `no activity for ${eff.idleTimeoutSeconds}s; suspended with its volume kept, activity resumes it`,
      };
    }
  }
  return undefined;
}

export function recordSuspended(
  ctx: Ctx,
  sbx: Sandbox,
  st: SandboxStatusBuilder,
  suspension: Suspension,
): void {
  if (st.phase !== "Suspended") {
    const reason = suspension.reason === "UserRequested" ? "Suspended" : suspension.reason;
    ctx.events.record(sbx, "Normal", reason, "Suspend", suspension.message);
    sandboxTransitions.inc({ reason: suspension.reason });
  }
  st.phaseIs("Suspended", suspension.reason, suspension.message)
    .condition({
      type: "Suspended",
      status: "True",
      reason: suspension.reason,
      message: suspension.message,
    })
    .set({ endpoint: undefined, startedAt: undefined });
  if (suspension.reason === "Evicted") {
    st.condition({
      type: "Evicted",
      status: "True",
      reason: "Evicted",
      message: suspension.message,
    });
  }
}

/** Clears what a suspension left in the status; true when the sandbox was Suspended. */
export function recordRunning(ctx: Ctx, sbx: Sandbox, st: SandboxStatusBuilder): boolean {
  const resuming = st.phase === "Suspended";
  if (st.conditionOf("Suspended")?.status === "True") {
    st.condition({
      type: "Suspended",
      status: "False",
      reason: "Resumed",
      message: "the sandbox runs again on the same volume",
    });
    ctx.events.record(sbx, "Normal", "Resumed", "Resume", "resuming on the same volume");
  }
  if (st.conditionOf("Evicted")?.status === "True") {
    st.condition({
      type: "Evicted",
      status: "False",
      reason: "Resumed",
      message: "resumed after eviction",
    });
  }
  return resuming;
}

/**
 * Children of a deleted Sandbox of the same name are still going: this one waits for them
 * (a second or so; the pod takes its grace period), saying so once the wait is long enough to ask
 * about.
 */
export function recordPreviousGoing(
  st: SandboxStatusBuilder,
  previous: KObject[],
  age: number,
): ReconcileResult {
  if (age >= QUIET_START_MS) {
    const what = previous.map((o) => `${o.kind ?? "object"} ${o.metadata.name}`).join(", ");
    st.phaseIs(
      "Pending",
      "PreviousSandboxTerminating",
      `waiting for ${what} of a deleted sandbox of the same name to be removed`,
    );
  }
  return { requeueAfterMs: 1_000 };
}

/** The pool is at maxActive and rejects more: the sandbox waits for a slot. */
export function recordWaitingForSlot(
  ctx: Ctx,
  sbx: Sandbox,
  pool: SandboxPool,
  st: SandboxStatusBuilder,
): void {
  const message = `SandboxPool "${pool.metadata.name}" runs its maxActive of ${pool.spec.maxActive} sandboxes and rejects more (evictionPolicy Reject); this one starts when a slot frees`;
  if (st.conditionOf("CapacityExceeded")?.status !== "True") {
    ctx.events.record(sbx, "Warning", "CapacityExceeded", "Wait", message);
  }
  st.phaseIs("Pending", "CapacityExceeded", message).condition({
    type: "CapacityExceeded",
    status: "True",
    reason: "CapacityExceeded",
    message,
  });
}

export function recordAdmitted(st: SandboxStatusBuilder): void {
  if (st.conditionOf("CapacityExceeded")) {
    st.condition({
      type: "CapacityExceeded",
      status: "False",
      reason: "Admitted",
      message: "a slot in the pool is free",
    });
  }
}

/** A warm pod was adopted: the sandbox is Ready at once. */
export function recordAdopted(sbx: Sandbox, st: SandboxStatusBuilder, adoption: Adoption): void {
  st.set({
    podName: adoption.podName,
    startedAt: st.now,
    readyAt: st.now,
    endpoint: `${adoption.podIP}:${SANDBOXD_PORT}`,
    initializedFor: adoption.initializedFor,
  });
  st.phaseIs("Ready", READY_REASON, READY_MESSAGE);
  sandboxReadySeconds.observe(
    { start: "warm" },
    (Date.now() - Date.parse(sbx.metadata.creationTimestamp!)) / 1000,
  );
  sandboxTransitions.inc({ reason: "Ready" });
}

export type PodStart =
  | { start: true; vanished: boolean; recreations: number }
  | { start: false; result: ReconcileResult | void };

/**
 * Whether to create the pod now. A pod that vanished or failed while the sandbox should run is
 * recreated with backoff, and after the operator's limit the sandbox is Failed.
 */
export function podStart(
  ctx: Ctx,
  sbx: Sandbox,
  podName: string,
  st: SandboxStatusBuilder,
  now: number,
  resuming: boolean,
): PodStart {
  const vanished = st.current.startedAt !== undefined && !resuming;
  let recreations = st.current.recreations ?? 0;
  if (!vanished) return { start: true, vanished, recreations };
  if (st.phase === "Failed") return { start: false, result: undefined };
  if (recreations >= ctx.cfg.maxRecreations) {
    const message = `the pod failed or disappeared ${recreations + 1} times without becoming ready; fix the cause and change the spec to retry`;
    fail(ctx, sbx, st, {
      reason: "TooManyRecreations",
      event: "Failed",
      action: "GiveUp",
      message,
    });
    return { start: false, result: undefined };
  }
  const backoff = Math.min(1000 * 2 ** recreations, MAX_RECREATE_BACKOFF_MS);
  const lastStart = Date.parse(st.current.startedAt!);
  if (now < lastStart + backoff) {
    st.phaseIs(
      "Starting",
      "PodRecreating",
      `the pod is gone; recreating it in ${Math.ceil((lastStart + backoff - now) / 1000)}s`,
    );
    return { start: false, result: { requeueAfterMs: lastStart + backoff - now } };
  }
  recreations++;
  ctx.events.record(
    sbx,
    "Warning",
    "PodRecreated",
    "Recreate",
    `pod ${podName} was gone; recreating it (attempt ${recreations})`,
  );
  return { start: true, vanished, recreations };
}

/** The pod was created. */
export function recordPodCreated(
  ctx: Ctx,
  sbx: Sandbox,
  podName: string,
  st: SandboxStatusBuilder,
  now: number,
  resuming: boolean,
  started: { vanished: boolean; recreations: number },
): ReconcileResult {
  if (resuming)
    ctx.events.record(
      sbx,
      "Normal",
      "Resuming",
      "Start",
      `starting pod ${podName} on volume ${dataClaimName(podName)}`,
    );
  // A first start says nothing until it is slow (the Ready write records when it started):
  // one status write fewer per sandbox. A restart is recorded at once, for the backoff.
  const firstStart = !started.vanished && !resuming && st.phase === undefined;
  if (firstStart && now - Date.parse(sbx.metadata.creationTimestamp!) < QUIET_START_MS) {
    return { requeueAfterMs: QUIET_START_MS };
  }
  st.set({
    startedAt: st.now,
    recreations: started.recreations || undefined,
    endpoint: undefined,
    initializedFor: undefined,
  });
  st.phaseIs("Starting", "PodCreated", `pod ${podName} created`);
  return { requeueAfterMs: QUIET_START_MS };
}

/** Reasons the kubelet gives, in a Warning Event, for ending a pod it runs. */
const KUBELET_ENDINGS = new Set(["Evicted", "Preempting"]);

/**
 * What the kubelet said when it ended `pod`, for a pod whose status does not say (no reason, no
 * disruption condition): an eviction's status can be lost to the container's own exit, while
 * its Event ("Usage of EmptyDir volume "tmp" exceeds the limit") is recorded before the kill.
 * Undefined when the status says, or no such Event is found (a failed read is not fatal).
 */
export async function kubeletEnding(ctx: Ctx, pod: Pod): Promise<Failure | undefined> {
  if (statusExplains(pod)) return undefined;
  try {
    const events = await ctx.kube.list<CoreEvent>(CORE_EVENTS, pod.metadata.namespace, {
      fieldSelector: `involvedObject.uid=${pod.metadata.uid},type=Warning`,
    });
    const said = events.items
      .filter((e) => e.source?.component === "kubelet" && KUBELET_ENDINGS.has(e.reason ?? ""))
      .sort((a, b) => when(a) - when(b))
      .at(-1);
    return said ? { reason: said.reason!, message: said.message ?? said.reason! } : undefined;
  } catch {
    return undefined;
  }
}

const when = (e: CoreEvent) => Date.parse(e.lastTimestamp ?? e.eventTime ?? "") || 0;

/** The pod failed or completed: it is recreated, and why it ended stays on the Sandbox. */
export function recordPodFailed(
  ctx: Ctx,
  sbx: Sandbox,
  pod: Pod,
  st: SandboxStatusBuilder,
  said?: Failure,
): void {
  const end = said ?? podEnd(pod);
  ctx.events.record(
    sbx,
    "Warning",
    end.reason,
    "Recreate",
    `pod ${pod.metadata.name} ended: ${end.message}; recreating it`,
  );
  st.phaseIs("Starting", "PodFailed", `pod ${end.reason}: ${end.message}; recreating it`).set({
    endpoint: undefined,
    lastFailure: failure(st, pod, end),
  });
}

/** sandboxd died and the kubelet restarted it in place (an OOM kill, say): said once per restart. */
export function recordRestart(ctx: Ctx, sbx: Sandbox, pod: Pod, st: SandboxStatusBuilder): void {
  const restart = lastRestart(pod);
  if (!restart) return;
  const last = st.current.lastFailure;
  if (last && last.podUID === pod.metadata.uid && last.restarts >= restartCount(pod)) return;
  ctx.events.record(sbx, "Warning", restart.reason, "Restart", restart.message);
  st.set({ lastFailure: failure(st, pod, restart) });
}

function failure(st: SandboxStatusBuilder, pod: Pod, f: Failure) {
  return {
    reason: f.reason.slice(0, 128),
    message: f.message.slice(0, 1024),
    at: st.now,
    podUID: pod.metadata.uid ?? "",
    restarts: restartCount(pod),
  };
}

/** The pod is not serving: say why, once it has been long enough to matter. */
export function notServingYet(
  ctx: Ctx,
  sbx: Sandbox,
  st: SandboxStatusBuilder,
  pod: Pod,
  now: number,
): ReconcileResult | void {
  const p = podProblem(pod);
  // A container that keeps dying is a failed sandbox once it has used up its restarts; the pod
  // stays (its logs explain why) and the sandbox comes back by itself if sandboxd ever serves.
  const restarts = restartCount(pod);
  if (p.reason === "CrashLoopBackOff" && restarts > ctx.cfg.maxRecreations) {
    const last = pod.status?.containerStatuses?.[0]?.lastState?.terminated;
    const message = `sandboxd exited ${restarts + 1} times${last?.reason ? ` (last: ${last.reason}, exit code ${last.exitCode})` : ""}; see the pod's logs, then fix the spec`;
    fail(ctx, sbx, st, { reason: "CrashLoopBackOff", event: "Failed", action: "GiveUp", message });
    return;
  }
  if (p.stuck && st.conditionOf("Ready")?.reason !== p.reason) {
    ctx.events.record(sbx, "Warning", p.reason, "Wait", p.message);
  }
  if (p.stuck) {
    st.phaseIs(p.phase, p.reason, p.message);
    return { requeueAfterMs: 10_000 };
  }
  return slowStart(st, now, p.reason, p.message, QUIET_START_MS, p.phase);
}

/** Reports a transient starting state only when starting has taken QUIET_START_MS. */
export function slowStart(
  st: SandboxStatusBuilder,
  now: number,
  reason: string,
  message: string,
  retryMs: number,
  phase: "Pending" | "Starting" = "Starting",
): ReconcileResult {
  const since = Date.parse(st.current.startedAt ?? st.sandbox.metadata.creationTimestamp!);
  if (st.phase === "Ready" || now - since >= QUIET_START_MS) {
    st.phaseIs(phase, reason, message).set({
      endpoint: undefined,
      startedAt: st.current.startedAt ?? st.now,
    });
  }
  return { requeueAfterMs: retryMs };
}

/**
 * sandboxd refused to initialise (a package that does not install): retrying cannot help, so the
 * sandbox is Failed until the spec changes or the pod is replaced.
 */
export function recordInitRejected(
  ctx: Ctx,
  sbx: Sandbox,
  st: SandboxStatusBuilder,
  message: string,
  initFor: string,
): void {
  const reason = "PackageInstallFailed";
  fail(ctx, sbx, st, { reason, event: reason, action: "GiveUp", message }).set({
    initializedFor: `failed:${initFor}`,
  });
}

/**
 * A subPath names a user or thread the sandbox does not have: no pod is made (the whole claim
 * is never mounted in its place) until the spec says who it is for.
 */
export function recordInvalidMounts(
  ctx: Ctx,
  sbx: Sandbox,
  st: SandboxStatusBuilder,
  message: string,
): void {
  const reason = "InvalidMounts";
  fail(ctx, sbx, st, { reason, event: reason, action: "Start", message });
}

/**
 * The sandbox's limits or disk lie outside its pool's (or the platform's) bounds: it is never
 * started, and a running pod is stopped, until the spec or the bounds change.
 */
/**
 * A sandbox whose spec the platform will not start: limits out of bounds
 * (ResourcesOutOfBounds), domains with no egress proxy (EgressProxyNotConfigured).
 */
export function recordNotStartable(
  ctx: Ctx,
  sbx: Sandbox,
  st: SandboxStatusBuilder,
  problem: { reason: string; message: string },
): void {
  const { reason, message } = problem;
  fail(ctx, sbx, st, { reason, event: reason, action: "Start", message });
}

export function recordReady(
  ctx: Ctx,
  sbx: Sandbox,
  st: SandboxStatusBuilder,
  pod: Pod,
  resuming: boolean,
): void {
  const ip = pod.status!.podIP!;
  if (st.phase !== "Ready") {
    const start = resuming || st.current.readyAt ? "resume" : "cold";
    const since =
      start === "cold"
        ? Date.parse(sbx.metadata.creationTimestamp!)
        : Date.parse(st.current.startedAt ?? st.now);
    sandboxReadySeconds.observe({ start }, Math.max(0, Date.now() - since) / 1000);
    sandboxTransitions.inc({ reason: "Ready" });
    ctx.events.record(
      sbx,
      "Normal",
      "Ready",
      "Start",
      `sandboxd is serving at ${ip}:${SANDBOXD_PORT}`,
    );
    st.set({ readyAt: st.now, recreations: undefined });
  }
  st.phaseIs("Ready", READY_REASON, READY_MESSAGE).set({
    endpoint: `${ip}:${SANDBOXD_PORT}`,
    startedAt:
      st.current.startedAt ?? pod.status?.containerStatuses?.[0]?.state?.running?.startedAt,
  });
}

/** When the next timer (expiry or idle timeout) fires. */
export function nextDeadline(
  eff: Effective,
  st: SandboxStatusBuilder,
  expiresAt: number,
  now: number,
): number {
  let at = expiresAt;
  if (eff.idleTimeoutSeconds) {
    const last = Math.max(
      Date.parse(st.sandbox.status?.lastActivityTime ?? "") || 0,
      Date.parse(st.current.readyAt ?? st.now),
    );
    at = Math.min(at, last + eff.idleTimeoutSeconds * 1000);
  }
  return Math.max(1_000, at - now);
}

/**
 * The sandbox is Failed for `reason` and has no endpoint; the Warning event and the transition
 * are recorded only when it was not Failed already, so a repeated pass stays quiet.
 */
function fail(
  ctx: Ctx,
  sbx: Sandbox,
  st: SandboxStatusBuilder,
  o: { reason: string; event: string; action: string; message: string },
): SandboxStatusBuilder {
  if (st.phase !== "Failed") {
    ctx.events.record(sbx, "Warning", o.event, o.action, o.message);
    sandboxTransitions.inc({ reason: "Failed" });
  }
  return st.phaseIs("Failed", o.reason, o.message).set({ endpoint: undefined });
}
