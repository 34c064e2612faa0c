/** Reading a Pod's status the way a user would want it explained. */
import type { Pod } from "../kube/resources.ts";

export function podReady(pod: Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
}

export function restartCount(pod: Pod): number {
  return pod.status?.containerStatuses?.[0]?.restartCount ?? 0;
}

export function containerRunning(pod: Pod): boolean {
  return Boolean(pod.status?.containerStatuses?.[0]?.state?.running);
}

/** Waiting reasons that need a person (or a fix), not patience. */
const STUCK = new Set([
  "ErrImagePull",
  "ImagePullBackOff",
  "ErrImageNeverPull",
  "InvalidImageName",
  "CreateContainerConfigError",
  "CreateContainerError",
  "CrashLoopBackOff",
  "RunContainerError",
]);

export interface PodProblem {
  /** Pending: not on a node yet; Starting: on a node, not serving yet. */
  phase: "Pending" | "Starting";
  reason: string;
  message: string;
  stuck: boolean;
}

/** Why a pod is not serving yet, in the pod's own words. */
export function podProblem(pod: Pod): PodProblem {
  const scheduled = pod.status?.conditions?.find((c) => c.type === "PodScheduled");
  if (scheduled?.status === "False") {
    // The scheduler waits for a claim that does not exist (a mount's, or a shared user-data
    // claim): it is the user's to create, and the pod schedules once it does.
    const missing = /persistentvolumeclaim "([^"]+)" not found/.exec(scheduled.message ?? "");
    if (missing) {
      return {
        phase: "Pending",
        reason: "ClaimNotFound",
        message: `PersistentVolumeClaim ${missing[1]} does not exist in namespace ${pod.metadata.namespace}; the sandbox starts once it does (or fix spec.mounts or spec.storage.sharedClaim)`,
        stuck: true,
      };
    }
    return {
      phase: "Pending",
      reason: scheduled.reason ?? "Unschedulable",
      message: scheduled.message ?? "the pod cannot be scheduled",
      stuck: scheduled.reason === "Unschedulable",
    };
  }
  const cs = pod.status?.containerStatuses?.[0];
  const waiting = cs?.state?.waiting;
  if (waiting?.reason) {
    return {
      phase: "Starting",
      reason: waiting.reason,
      message: waiting.message ?? `container is ${waiting.reason}`,
      stuck: STUCK.has(waiting.reason),
    };
  }
  if (cs?.state?.terminated) {
    const t = cs.state.terminated;
    return {
      phase: "Starting",
      reason: "ContainerTerminated",
      message: `sandboxd exited (${t.reason ?? "exit code " + t.exitCode}); the kubelet restarts it`,
      stuck: false,
    };
  }
  return {
    phase: "Starting",
    reason: "ContainerCreating",
    message: "the pod is starting",
    stuck: false,
  };
}

export interface Failure {
  reason: string;
  message: string;
}

/**
 * Why a pod that will not run again (phase Failed or Succeeded) ended, in the kubelet's words:
 * the pod's own reason (Evicted, with the kubelet's message naming the resource), else a
 * disruption's (TerminationByKubelet, PreemptionByScheduler, DeletionByTaintManager...), else
 * what its container said when it exited (OOMKilled, Error and its exit code).
 */
export function podEnd(pod: Pod): Failure {
  const s = pod.status;
  if (s?.reason) return { reason: s.reason, message: s.message ?? `pod ${s.reason}` };
  const disruption = s?.conditions?.find(
    (c) => c.type === "DisruptionTarget" && c.status === "True",
  );
  if (disruption?.reason) {
    return { reason: disruption.reason, message: disruption.message ?? disruption.reason };
  }
  const t = s?.containerStatuses?.[0]?.state?.terminated;
  if (t) return { reason: t.reason ?? "Terminated", message: exited(t) };
  return { reason: s?.phase ?? "Unknown", message: `the pod is ${s?.phase ?? "gone"}` };
}

/** Whether the pod's status says why it ended: its own reason, or a disruption condition. */
export function statusExplains(pod: Pod): boolean {
  const s = pod.status;
  return (
    !!s?.reason ||
    !!s?.conditions?.some((c) => c.type === "DisruptionTarget" && c.status === "True")
  );
}

/** How long after its container ended a pod's status may still be waiting for its reason. */
export const REASON_WAIT_MS = 5_000;

/**
 * How long to wait before reading why `pod` ended (0: now). sandboxd exits 0 only when it is
 * asked to stop (SIGTERM), so an exit 0 with no reason and no disruption condition is a pod the
 * kubelet stopped, whose reason (Evicted, say) comes in a status update of its own: seen once,
 * the first update would be told as "Completed" for good.
 */
export function reasonPendingMs(pod: Pod, now: number): number {
  if (statusExplains(pod)) return 0;
  const t = pod.status?.containerStatuses?.[0]?.state?.terminated;
  if (t?.exitCode !== 0 || !t.finishedAt) return 0;
  return Math.max(0, Date.parse(t.finishedAt) + REASON_WAIT_MS - now);
}

/** Why the container last restarted in place (sandboxd died and the kubelet started it again). */
export function lastRestart(pod: Pod): Failure | undefined {
  const t = pod.status?.containerStatuses?.[0]?.lastState?.terminated;
  if (!t || restartCount(pod) === 0) return undefined;
  return {
    reason: t.reason ?? "Terminated",
    message: `${exited(t)}; the kubelet restarted it (restart ${restartCount(pod)})`,
  };
}

function exited(t: { reason?: string; exitCode?: number; message?: string }): string {
  const code = `exit code ${t.exitCode ?? "unknown"}`;
  const what =
    t.reason === "OOMKilled"
      ? `sandboxd was killed for using more than its memory limit (${code})`
      : `sandboxd exited (${t.reason ? `${t.reason}, ` : ""}${code})`;
  return t.message ? `${what}: ${t.message}` : what;
}
