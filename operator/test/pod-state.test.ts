/** Explaining why a pod does not serve yet. */
import { describe, expect, it } from "vitest";
import type { Pod } from "../src/kube/resources.ts";
import {
  containerRunning,
  lastRestart,
  podEnd,
  podProblem,
  podReady,
  REASON_WAIT_MS,
  reasonPendingMs,
  restartCount,
} from "../src/workload/pod-state.ts";

const pod = (status: Pod["status"]): Pod => ({ metadata: { name: "p" }, status });

describe("podProblem", () => {
  it("reports an unschedulable pod as Pending and stuck, in the scheduler's words", () => {
    const p = pod({
      phase: "Pending",
      conditions: [
        {
          type: "PodScheduled",
          status: "False",
          reason: "Unschedulable",
          message: "0/3 nodes are available: 3 Insufficient memory.",
        },
      ],
    });
    expect(podProblem(p)).toEqual({
      phase: "Pending",
      reason: "Unschedulable",
      message: "0/3 nodes are available: 3 Insufficient memory.",
      stuck: true,
    });
  });

  it("names a claim that does not exist (a mount's or a shared one) with reason ClaimNotFound", () => {
    const p: Pod = {
      metadata: { name: "p", namespace: "team-a" },
      status: {
        phase: "Pending",
        conditions: [
          {
            type: "PodScheduled",
            status: "False",
            reason: "Unschedulable",
            message:
              '0/1 nodes are available: persistentvolumeclaim "skills" not found. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.',
          },
        ],
      },
    };
    expect(podProblem(p)).toMatchObject({ phase: "Pending", reason: "ClaimNotFound", stuck: true });
    expect(podProblem(p).message).toMatch(
      /^PersistentVolumeClaim skills does not exist in namespace team-a/,
    );
  });

  it("reports an image that cannot be pulled as Starting and stuck", () => {
    const p = pod({
      phase: "Pending",
      conditions: [{ type: "PodScheduled", status: "True" }],
      containerStatuses: [
        {
          restartCount: 0,
          state: {
            waiting: { reason: "ImagePullBackOff", message: 'Back-off pulling image "nope:1"' },
          },
        },
      ],
    });
    expect(podProblem(p)).toEqual({
      phase: "Starting",
      reason: "ImagePullBackOff",
      message: 'Back-off pulling image "nope:1"',
      stuck: true,
    });
  });

  it("reports a container being created as Starting, not stuck", () => {
    const creating = pod({
      phase: "Pending",
      conditions: [{ type: "PodScheduled", status: "True" }],
      containerStatuses: [{ restartCount: 0, state: { waiting: { reason: "ContainerCreating" } } }],
    });
    expect(podProblem(creating)).toEqual({
      phase: "Starting",
      reason: "ContainerCreating",
      message: "container is ContainerCreating",
      stuck: false,
    });
    // Scheduled, no container status yet: still being created.
    expect(podProblem(pod({ conditions: [{ type: "PodScheduled", status: "True" }] }))).toEqual({
      phase: "Starting",
      reason: "ContainerCreating",
      message: "the pod is starting",
      stuck: false,
    });
    expect(podProblem(pod(undefined)).reason).toBe("ContainerCreating");
  });

  it("counts a crash loop as stuck and a terminated container as restarting", () => {
    const crash = pod({
      containerStatuses: [
        {
          restartCount: 4,
          state: { waiting: { reason: "CrashLoopBackOff", message: "back-off" } },
        },
      ],
    });
    expect(podProblem(crash)).toMatchObject({ reason: "CrashLoopBackOff", stuck: true });
    const exited = pod({
      containerStatuses: [{ restartCount: 1, state: { terminated: { exitCode: 137 } } }],
    });
    expect(podProblem(exited)).toMatchObject({
      phase: "Starting",
      reason: "ContainerTerminated",
      stuck: false,
    });
    expect(podProblem(exited).message).toContain("exit code 137");
  });

  it("does not call a pod waiting for scheduling for another reason stuck", () => {
    const p = pod({
      conditions: [{ type: "PodScheduled", status: "False", reason: "SchedulingGated" }],
    });
    expect(podProblem(p)).toMatchObject({
      phase: "Pending",
      reason: "SchedulingGated",
      stuck: false,
    });
  });
});

describe("pod status helpers", () => {
  it("reads readiness, restarts and whether the container runs", () => {
    const ready = pod({
      conditions: [{ type: "Ready", status: "True" }],
      containerStatuses: [
        { restartCount: 2, state: { running: { startedAt: "2025-01-01T00:00:00Z" } } },
      ],
    });
    expect(podReady(ready)).toBe(true);
    expect(restartCount(ready)).toBe(2);
    expect(containerRunning(ready)).toBe(true);
    const fresh = pod({ conditions: [{ type: "Ready", status: "False" }] });
    expect(podReady(fresh)).toBe(false);
    expect(restartCount(fresh)).toBe(0);
    expect(containerRunning(fresh)).toBe(false);
    expect(podReady(pod(undefined))).toBe(false);
  });
});

describe("podEnd and lastRestart", () => {
  it("takes the pod's own reason first: an eviction, with the kubelet's message", () => {
    const p = pod({
      phase: "Failed",
      reason: "Evicted",
      message: "The node was low on resource: memory.",
    });
    expect(podEnd(p)).toEqual({
      reason: "Evicted",
      message: "The node was low on resource: memory.",
    });
  });

  it("then a disruption's, then what the container said when it exited", () => {
    const disrupted = pod({
      phase: "Succeeded",
      conditions: [
        { type: "DisruptionTarget", status: "True", reason: "PreemptionByScheduler", message: "m" },
      ],
    });
    expect(podEnd(disrupted)).toEqual({ reason: "PreemptionByScheduler", message: "m" });
    const oom = pod({
      phase: "Failed",
      containerStatuses: [
        { restartCount: 0, state: { terminated: { reason: "OOMKilled", exitCode: 137 } } },
      ],
    });
    expect(podEnd(oom)).toEqual({
      reason: "OOMKilled",
      message: "sandboxd was killed for using more than its memory limit (exit code 137)",
    });
    expect(podEnd(pod({ phase: "Succeeded" })).reason).toBe("Succeeded");
  });

  it("waits a moment for the kubelet's reason of a pod whose sandboxd was stopped (exit 0)", () => {
    const finishedAt = "2026-12-04T16:36:10Z";
    const at = Date.parse(finishedAt);
    const stopped = (extra: Partial<NonNullable<Pod["status"]>> = {}) =>
      pod({
        phase: "Succeeded",
        containerStatuses: [
          {
            restartCount: 0,
            state: { terminated: { reason: "Completed", exitCode: 0, finishedAt } },
          },
        ],
        ...extra,
      });
    expect(reasonPendingMs(stopped(), at + 1_000)).toBe(REASON_WAIT_MS - 1_000);
    expect(reasonPendingMs(stopped(), at + REASON_WAIT_MS)).toBe(0); // then what there is
    expect(reasonPendingMs(stopped({ reason: "Evicted" }), at)).toBe(0);
    const disrupted = { conditions: [{ type: "DisruptionTarget", status: "True", reason: "R" }] };
    expect(reasonPendingMs(stopped(disrupted), at)).toBe(0);
    const crashed = pod({
      phase: "Failed",
      containerStatuses: [
        { restartCount: 0, state: { terminated: { reason: "Error", exitCode: 1, finishedAt } } },
      ],
    });
    expect(reasonPendingMs(crashed, at)).toBe(0); // its own exit says why
  });

  it("reports a restart in place only when there was one", () => {
    const running = { running: { startedAt: "x" } };
    expect(lastRestart(pod({ containerStatuses: [{ restartCount: 0, state: running }] }))).toBe(
      undefined,
    );
    const restarted = pod({
      containerStatuses: [
        {
          restartCount: 2,
          state: running,
          lastState: { terminated: { reason: "Error", exitCode: 1 } },
        },
      ],
    });
    expect(lastRestart(restarted)).toEqual({
      reason: "Error",
      message: "sandboxd exited (Error, exit code 1); the kubelet restarted it (restart 2)",
    });
  });
});
