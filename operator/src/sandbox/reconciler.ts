/**
 * The Sandbox reconciler: from a Sandbox's spec (plus its pool's template and the operator's
 * defaults) to a running, reachable, isolated sandbox, and back down again on suspension, idle
 * timeout, eviction or expiry. Level-triggered: it reads everything from the caches by key, and
 * each pass moves the sandbox one step closer to what its spec says. What a pool adds (its cap,
 * its warm pods) comes in through PoolMembership.
 *
 * Writes are kept few (an agent runtime creates thousands; docs/architecture.md): children are
 * applied only when missing or changed, and a status that only says "still starting" is written
 * only when starting takes long enough for someone to want to know why.
 */
import { dataClaimName, tokenSecretName } from "../api/names.ts";
import { packageSpec } from "../api/packages.ts";
import { SANDBOXES, type Sandbox, type SandboxPool } from "../api/v1alpha1.ts";
import type { ReconcileResult } from "../controller/controller.ts";
import { type Ctx, splitKey } from "../context.ts";
import { NETWORK_POLICIES, PODS, PVCS, type Pod, SECRETS } from "../kube/resources.ts";
import { isNotFound } from "../kube/rest.ts";
import { sandboxTransitions } from "../metrics.ts";
import { controlledByAnother } from "../workload/manifests.ts";
import { podMounts } from "../workload/mounts.ts";
import {
  containerRunning,
  podReady,
  reasonPendingMs,
  restartCount,
} from "../workload/pod-state.ts";
import { InitRejected, health, init } from "../workload/sandboxd.ts";
import { diskCondition } from "../workload/disk.ts";
import { type Effective, effectiveSpec, notStartableReason } from "../workload/spec.ts";
import {
  clearPrevious,
  createPod,
  ensureAdoptedClaim,
  ensureClaim,
  isolate,
  ensureTokenSecret,
  stopPod,
} from "./children.ts";
import {
  QUIET_START_MS,
  nextDeadline,
  notServingYet,
  podStart,
  recordAdmitted,
  recordAdopted,
  recordInitRejected,
  recordInvalidMounts,
  recordNotStartable,
  recordPodCreated,
  kubeletEnding,
  recordPodFailed,
  recordRestart,
  recordPreviousGoing,
  recordReady,
  recordRunning,
  recordSuspended,
  recordWaitingForSlot,
  slowStart,
  suspensionOf,
} from "./lifecycle.ts";
import type { PoolMembership } from "./membership.ts";
import { PROGRESS_EVERY_MS, SandboxStatusBuilder } from "./status.ts";

/** A PVC that has not bound by then is probably WaitForFirstConsumer: create the pod anyway. */
const BIND_WAIT_MS = 2_000;
/** sandboxd answers within this of its container starting, on a machine that is not starved. */
const FRESH_CONTAINER_MS = 3_000;

/**
 * When to probe a sandboxd that did not answer again. Closely while its container is fresh (to
 * see it serve sooner than the kubelet's 1 s readiness probe would). After that the kubelet's
 * probe does the waiting: the pod turning Ready requeues the sandbox, so until then a slow
 * check suffices. A pod Ready to the kubelet that does not answer the operator (something in
 * the way) is checked less and less often. Thousands of sandboxes that never answer then cost
 * a few dozen probes each over their first minutes, not a poll every few milliseconds.
 */
function probeAgainIn(pod: Pod, now: number): number {
  const runningFor = containerRunningFor(pod, now);
  if (runningFor < FRESH_CONTAINER_MS) return Math.min(500, Math.max(50, runningFor / 2));
  if (!podReady(pod)) return 30_000;
  return Math.min(30_000, Math.round(runningFor / 4));
}

/**
 * When to ask a sandboxd whose network policy is not in force yet again. The pod turning Ready
 * (its readiness probe is /readyz, which says the same) requeues the sandbox at once, so this
 * is only the fallback: often at first, then less and less, so that sandboxes on a cluster
 * that never enforces a policy cost little.
 */
function policyRecheckIn(pod: Pod, now: number): number {
  return Math.min(30_000, Math.max(250, Math.round(containerRunningFor(pod, now) / 8)));
}

/** How long the pod's container has run (0 when it is not running or has not said). */
function containerRunningFor(pod: Pod, now: number): number {
  const started = Date.parse(pod.status?.containerStatuses?.[0]?.state?.running?.startedAt ?? "");
  return now - (started || now);
}

export async function reconcileSandbox(
  ctx: Ctx,
  pools: PoolMembership,
  key: string,
  signal: AbortSignal,
): Promise<ReconcileResult | void> {
  const [ns, name] = splitKey(key);
  const sbx = ctx.caches.sandboxes.get(name, ns);
  if (!sbx || sbx.metadata.deletionTimestamp) return; // children go with it (ownerReferences)
  const now = new Date();
  const st = new SandboxStatusBuilder(sbx, now);
  const poolName = sbx.spec.poolRef;
  const pool = poolName ? ctx.caches.pools.get(poolName, ns) : undefined;
  if (poolName && !pool) {
    st.phaseIs(
      "Pending",
      "PoolNotFound",
      `SandboxPool "${poolName}" does not exist in namespace ${ns}`,
    );
    await st.write(ctx);
    return; // the pool's arrival enqueues its members
  }
  const eff = effectiveSpec(sbx.spec, pool?.spec, ctx.cfg);

  // Lifetime: past it, the sandbox is deleted, children and all.
  const created = Date.parse(sbx.metadata.creationTimestamp!);
  const expiresAt = created + eff.ttlSeconds * 1000;
  if (now.getTime() >= expiresAt) {
    ctx.events.record(
      sbx,
      "Normal",
      "Expired",
      "Delete",
      `lifetime of ${eff.ttlSeconds}s ended; deleting the sandbox`,
    );
    sandboxTransitions.inc({ reason: "Expired" });
    await ctx.kube.delete(SANDBOXES, ns, name, { uid: sbx.metadata.uid! });
    return;
  }
  st.set({ expiresAt: new Date(expiresAt).toISOString() });
  if (st.current.observedGeneration !== sbx.metadata.generation) {
    // A changed spec is a new attempt: past failures no longer count.
    st.set({ recreations: undefined });
    if (st.current.initializedFor?.startsWith("failed:")) st.set({ initializedFor: undefined });
  }

  let result: ReconcileResult | void;
  const previous = await clearPrevious(ctx, sbx, [
    [SECRETS, ctx.caches.secrets.get(tokenSecretName(name), ns)],
    [NETWORK_POLICIES, ctx.caches.networkPolicies.get(name, ns)],
  ]);
  if (previous.length > 0) {
    // No pod name in status yet: a member that waited here can still adopt a warm pod.
    result = recordPreviousGoing(st, previous, Date.parse(st.now) - created);
  } else {
    const podName = st.current.podName ?? pools.adoptedPod(sbx) ?? name;
    st.set({ tokenSecretRef: tokenSecretName(name), podName });
    // The children every state has are made alongside the run state's work (a warm adoption
    // needs none of them to finish first); whatever waits on the token awaits it.
    const token = ensureTokenSecret(ctx, sbx);
    const isolated = isolate(ctx, sbx, eff, podName);
    const children = Promise.all([
      token,
      isolated,
      // A cold sandbox's own volume is made with its pod (an adopted one brings its own).
      podName === name ? undefined : ensureAdoptedClaim(ctx, sbx, podName),
    ]);
    children.catch(() => undefined); // awaited below; never an unhandled rejection meanwhile
    try {
      result = await runState(ctx, pools, {
        sbx,
        pool,
        eff,
        st,
        token,
        isolated,
        podName,
        expiresAt,
        signal,
      });
    } finally {
      await children;
    }
  }
  // Whether /mnt/user-data is held to its size, carried by whatever status write happens.
  st.condition(
    diskCondition({
      size: eff.storage.size,
      sharedClaim: eff.storage.sharedClaim,
      specClass: eff.storage.storageClassName,
      claim: ctx.caches.claims.get(dataClaimName(st.current.podName ?? name), ns),
      classes: {
        get: (n) => ctx.caches.storageClasses.get(n),
        list: () => ctx.caches.storageClasses.list(),
      },
      trusted: ctx.cfg.capacityEnforcingClasses,
    }),
  );
  // A sandbox that has reported nothing yet stays quiet through a normal start: its first
  // status is Ready (one write), unless starting takes long enough to be worth explaining.
  const age = Date.parse(st.now) - created;
  if (st.phase === undefined && age < QUIET_START_MS) {
    return {
      requeueAfterMs: Math.min(result?.requeueAfterMs ?? QUIET_START_MS, QUIET_START_MS - age),
    };
  }
  await st.write(ctx);
  if (st.heldBack) {
    const soon = Math.min(result?.requeueAfterMs ?? PROGRESS_EVERY_MS, PROGRESS_EVERY_MS);
    return { ...result, requeueAfterMs: soon };
  }
  return result;
}

/** One reconcile of one sandbox: what it is, and what the steps below share. */
interface Run {
  sbx: Sandbox;
  pool: SandboxPool | undefined;
  eff: Effective;
  st: SandboxStatusBuilder;
  token: Promise<string>;
  /** Settles once the network policies the sandbox's pod needs are written. */
  isolated: Promise<unknown>;
  podName: string;
  expiresAt: number;
  signal: AbortSignal;
}

/** Asleep, waiting for a slot, adopting, starting, or serving: one step of whichever applies. */
async function runState(ctx: Ctx, pools: PoolMembership, r: Run): Promise<ReconcileResult | void> {
  const { sbx, pool, st } = r;
  const ns = sbx.metadata.namespace!;
  const now = Date.parse(st.now);
  const untilExpiry = r.expiresAt - now;
  const found = ctx.caches.pods.get(r.podName, ns);
  // A deleted namesake's pod is not this sandbox's, whatever its name and labels say.
  const pod = controlledByAnother(found, sbx) ? undefined : found;

  const suspension = suspensionOf(pools, sbx, r.eff, st, now);
  if (suspension?.reason === "IdleTimeout" && sbx.status?.phase !== "Suspended") {
    // The status only knows of traffic through the provisioner; sandboxd knows of work that
    // runs silently (a quiet job, an open terminal). Asked last, just before the pod stops.
    const busyFor = await stillBusy(pod, r.eff);
    if (busyFor !== undefined) return { requeueAfterMs: busyFor };
  }
  if (suspension) {
    if (pool) pools.release(sbx, pool);
    await stopPod(ctx, pod);
    recordSuspended(ctx, sbx, st, suspension);
    return { requeueAfterMs: untilExpiry };
  }
  // Limits are the platform's policy: a sandbox outside its bounds takes no slot and runs nothing.
  // Nor does one whose domains nothing could enforce.
  const notStartable = notStartableReason(r.eff, pool?.spec, ctx.cfg);
  if (notStartable) {
    if (pool) pools.release(sbx, pool);
    await stopPod(ctx, pod);
    recordNotStartable(ctx, sbx, st, notStartable);
    return { requeueAfterMs: untilExpiry };
  }
  const resuming = recordRunning(ctx, sbx, st);

  // The pool's cap: take a slot, or wait (Reject), or make room (LRU).
  if (pool) {
    if (!pools.admit(sbx, pool)) {
      recordWaitingForSlot(ctx, sbx, pool, st);
      await stopPod(ctx, pod);
      return { requeueAfterMs: untilExpiry };
    }
    recordAdmitted(st);
  }

  if (!pod) {
    // Created, and its event is on the way (with a timer in case it never comes).
    if (ctx.podExpectations.pending(`${ns}/${r.podName}`)) return { requeueAfterMs: 1_000 };
    const neverRan = !sbx.status?.podName && !sbx.status?.readyAt;
    if (pool && neverRan && r.podName === sbx.metadata.name) {
      const adoption = await pools.adopt(sbx, pool, r.eff, r.token, r.isolated, r.signal);
      if (adoption) {
        recordAdopted(sbx, st, adoption);
        return { requeueAfterMs: nextDeadline(r.eff, st, r.expiresAt, now) };
      }
    }
    return start(ctx, r, now, resuming);
  }

  if (pod.metadata.deletionTimestamp) {
    st.phaseIs("Starting", "PodTerminating", "waiting for the previous pod to terminate");
    return;
  }
  if (pod.status?.phase === "Failed" || pod.status?.phase === "Succeeded") {
    const said = await kubeletEnding(ctx, pod);
    // No word from the kubelet yet on a pod it stopped: its Event may still be on the way.
    const pending = said ? 0 : reasonPendingMs(pod, now);
    if (pending > 0) {
      st.phaseIs("Starting", "PodEnded", `pod ${pod.metadata.name} ended; reading why`);
      return { requeueAfterMs: pending };
    }
    recordPodFailed(ctx, sbx, pod, st, said);
    await stopPod(ctx, pod);
    return;
  }
  recordRestart(ctx, sbx, pod, st);
  return serve(ctx, pools, r, pod, now, resuming);
}

/** No pod: create one on the sandbox's volume (with backoff if the last one vanished). */
async function start(
  ctx: Ctx,
  r: Run,
  now: number,
  resuming: boolean,
): Promise<ReconcileResult | void> {
  const { sbx, st } = r;
  const ns = sbx.metadata.namespace!;
  // A sandbox whose user data lives in a shared claim has no claim of its own.
  const ownClaim = r.eff.storage.sharedClaim ? undefined : dataClaimName(r.podName);
  const previous = await clearPrevious(ctx, sbx, [
    [PODS, ctx.caches.pods.get(r.podName, ns)],
    [PVCS, ownClaim ? ctx.caches.claims.get(ownClaim, ns) : undefined],
  ]);
  if (previous.length > 0) {
    return recordPreviousGoing(st, previous, now - Date.parse(sbx.metadata.creationTimestamp!));
  }
  const resolved = podMounts(r.eff, sbx.spec, ownClaim ?? "");
  if ("problem" in resolved) return recordInvalidMounts(ctx, sbx, st, resolved.problem);
  // A pod that vanished is made again only for a Sandbox that still exists, read live: a Sandbox
  // just deleted is still in a lagging cache while the garbage collector removes its pod and
  // volume, and a pod made again then would wait for a claim that is gone.
  if (st.current.startedAt !== undefined && !resuming && !(await stillExists(ctx, sbx))) return;
  const decision = podStart(ctx, sbx, r.podName, st, now, resuming);
  if (!decision.start) return decision.result;

  if (ownClaim) {
    await ensureClaim(ctx, sbx, r.eff, ownClaim);
    const claim = ctx.caches.claims.get(ownClaim, ns);
    if (claim?.status?.phase !== "Bound") {
      const age = now - Date.parse(claim?.metadata.creationTimestamp ?? st.now);
      if (age < BIND_WAIT_MS) return { requeueAfterMs: BIND_WAIT_MS - age }; // the bind event comes first
    }
  }
  await r.token; // the pod reads its token from the Secret: it must exist first
  await r.isolated; // and its policies: the node's enforcer programs the pod with all of them
  await createPod(ctx, sbx, r.eff, r.podName, resolved.mounts);
  return recordPodCreated(ctx, sbx, r.podName, st, now, resuming, decision);
}

/** A pod exists and is not going: wait for sandboxd, hand it what it needs, report Ready. */
async function serve(
  ctx: Ctx,
  pools: PoolMembership,
  r: Run,
  pod: Pod,
  now: number,
  resuming: boolean,
): Promise<ReconcileResult | void> {
  const { sbx, pool, eff, st } = r;
  const ip = pod.status?.podIP;
  if (!ip || !containerRunning(pod)) return notServingYet(ctx, sbx, st, pod, now);
  // One probe per pass; until sandboxd answers, the sandbox comes back through the queue, so
  // waiting never holds a worker (probeAgainIn says when).
  const h = await health(ip);
  if (!h) {
    return slowStart(
      st,
      now,
      "SandboxdStarting",
      "sandboxd does not answer its health check yet",
      probeAgainIn(pod, now),
    );
  }
  // No one's code runs before the pod's network policy is in force (sandboxd/src/isolation.ts):
  // until then the cluster's enforcer has not programmed the pod and nothing filters it.
  if (h.isolated === false) {
    return slowStart(
      st,
      now,
      "NetworkPolicyPending",
      "sandboxd runs; its network policy is not in force yet (the policy probe target still " +
        "answers from the pod). On a cluster that enforces no NetworkPolicy this never ends: " +
        "see SANDPIT_POLICY_PROBE in docs/security.md",
      policyRecheckIn(pod, now),
    );
  }

  // sandboxd needs its token, environment or packages handed over: after a warm adoption, a
  // container restart of an adopted pod, or when the spec lists packages.
  const initFor = `${pod.metadata.uid}/${restartCount(pod)}`;
  const adopted = r.podName !== sbx.metadata.name;
  if (st.current.initializedFor === `failed:${initFor}`) return; // Failed until spec or pod change
  if ((adopted || eff.packages.length > 0) && st.current.initializedFor !== initFor) {
    const tokens = [await r.token, ...(pool && adopted ? await pools.podTokens(pool, pod) : [])];
    try {
      await init(
        ip,
        adopted ? tokens.reverse() : tokens,
        {
          token: await r.token,
          env: eff.env,
          packages: eff.packages.map((p) => packageSpec(eff.language, p)),
          language: eff.language,
        },
        r.signal,
      );
    } catch (err) {
      if (!(err instanceof InitRejected)) throw err; // unreachable or interrupted: retry
      recordInitRejected(ctx, sbx, st, err.message, initFor);
      return;
    }
    st.set({ initializedFor: initFor });
  }

  recordReady(ctx, sbx, st, pod, resuming);
  return { requeueAfterMs: nextDeadline(eff, st, r.expiresAt, now) };
}

/**
 * How long until the sandbox can have been idle for its whole idle timeout, by sandboxd's own
 * measure, or undefined when it has been (or sandboxd does not answer: a sandboxd that cannot
 * say it is busy is not kept awake).
 */
async function stillBusy(pod: Pod | undefined, eff: Effective): Promise<number | undefined> {
  const ip = pod?.status?.podIP;
  if (!ip || !eff.idleTimeoutSeconds || pod.metadata.deletionTimestamp) return undefined;
  const idleMs = (await health(ip))?.idleMs;
  if (idleMs === undefined) return undefined;
  const left = eff.idleTimeoutSeconds * 1000 - idleMs;
  return left > 0 ? Math.max(1_000, left) : undefined;
}

/** Whether the Sandbox is still there, not being deleted, as the API server has it now. */
async function stillExists(ctx: Ctx, sbx: Sandbox): Promise<boolean> {
  try {
    const live = await ctx.kube.get<Sandbox>(SANDBOXES, sbx.metadata.namespace, sbx.metadata.name);
    return live.metadata.uid === sbx.metadata.uid && !live.metadata.deletionTimestamp;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw err;
  }
}
