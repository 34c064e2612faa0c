/**
 * The Sandbox reconciler: from a Sandbox's spec (plus its pool's template and the operator's
 * defaults) to a running, reachable, isolated sandbox, and back down again on suspension, idle
 * timeout, eviction or expiry. Level-triggered: it reads everything from the caches by key, and
 * each pass moves the sandbox one step closer to what its spec says.
 *
 * Writes are kept few (an agent runtime creates thousands; docs/architecture.md): children are
 * applied only when missing or changed, and a status that only says "still starting" is written
 * only when starting takes long enough for someone to want to know why.
 */
import type { ReconcileResult } from "../controller/controller.ts";
import { type Ctx, type Pod, type Sandbox, type SandboxPool, keyOf, splitKey } from "../context.ts";
import { isAlreadyExists, isConflict } from "../kube/client.ts";
import { NETWORK_POLICIES, PODS, PVCS, SANDBOXES, SECRETS, SERVICES } from "../kube/resources.ts";
import { sandboxReadySeconds, sandboxTransitions } from "../metrics.ts";
import { tryAdopt, warmToken } from "../pool/warm.ts";
import {
  ANNOTATION,
  type Effective,
  LABEL,
  SANDBOXD_PORT,
  dataClaim,
  effectiveSpec,
  networkPolicy,
  newToken,
  pod as podManifest,
  service,
  tokenSecret,
} from "./children.ts";
import { containerRunning, podProblem, restartCount } from "./pod-state.ts";
import { InitRejected, init, packageSpecs, waitHealthy } from "./sandboxd.ts";
import { SandboxStatusBuilder } from "./status.ts";

export const READY_REASON = "SandboxdServing";
export const READY_MESSAGE = "sandboxd answers on its endpoint";
/** Starting is reported in status only once it has taken this long (saves writes). */
const QUIET_START_MS = 3_000;
/** Pods recreated after failing wait 1 s, 2 s, 4 s ... up to this. */
const MAX_RECREATE_BACKOFF_MS = 60_000;
/** A PVC that has not bound by then is probably WaitForFirstConsumer: create the pod anyway. */
const BIND_WAIT_MS = 2_000;

export async function reconcileSandbox(
  ctx: Ctx,
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

  const podName =
    st.current.podName ?? ctx.adoptedPods.get(key) ?? adoptedPodName(ctx, sbx) ?? name;
  st.set({ serviceName: name, tokenSecretRef: `${name}-token`, podName });
  // The children every state has are made alongside the run state's work (a warm adoption
  // needs none of them to finish first); whatever waits on the token awaits it.
  const token = ensureTokenSecret(ctx, sbx);
  const children = Promise.all([
    token,
    ensureService(ctx, sbx),
    ensureNetworkPolicy(ctx, sbx, eff),
    // A cold sandbox's own volume is made with its pod (an adopted one brings its own).
    podName === name ? undefined : ensureAdoptedClaim(ctx, sbx, `${podName}-data`),
  ]);
  children.catch(() => undefined); // awaited below; never an unhandled rejection meanwhile
  let result: ReconcileResult | void;
  try {
    result = await runState(ctx, sbx, pool, eff, st, { token, podName, expiresAt, signal });
  } finally {
    await children;
  }
  // A sandbox that has reported nothing yet stays quiet through a normal start: its first
  // status is Ready (one write), unless starting takes long enough to be worth explaining.
  const age = Date.parse(st.now) - created;
  if (st.phase === undefined && age < QUIET_START_MS) {
    return {
      requeueAfterMs: Math.min(result?.requeueAfterMs ?? QUIET_START_MS, QUIET_START_MS - age),
    };
  }
  await st.write(ctx);
  return result;
}

interface RunArgs {
  token: Promise<string>;
  podName: string;
  expiresAt: number;
  signal: AbortSignal;
}

async function runState(
  ctx: Ctx,
  sbx: Sandbox,
  pool: SandboxPool | undefined,
  eff: Effective,
  st: SandboxStatusBuilder,
  a: RunArgs,
): Promise<ReconcileResult | void> {
  const key = keyOf(sbx);
  const ns = sbx.metadata.namespace!;
  const now = Date.parse(st.now);
  const untilExpiry = a.expiresAt - now;
  const poolKey = pool ? keyOf(pool) : undefined;
  const pod = ctx.caches.pods.get(a.podName, ns);

  const suspension = suspensionOf(ctx, sbx, eff, st, now);
  if (suspension) {
    if (poolKey) for (const k of ctx.admission.release(poolKey, key)) ctx.enqueueSandbox(k);
    if (pod && !pod.metadata.deletionTimestamp) {
      await ctx.kube.delete(PODS, ns, a.podName, { uid: pod.metadata.uid! });
    }
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
    return { requeueAfterMs: untilExpiry };
  }
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

  // The pool's cap: take a slot, or wait (Reject), or make room (LRU).
  if (pool && poolKey) {
    const admission = ctx.admission.admit(poolKey, key, poolView(ctx, pool));
    if (!admission.admitted) {
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
      if (pod && !pod.metadata.deletionTimestamp)
        await ctx.kube.delete(PODS, ns, a.podName, { uid: pod.metadata.uid! });
      return { requeueAfterMs: untilExpiry };
    }
    for (const victim of admission.victims) ctx.enqueueSandbox(victim);
    if (st.conditionOf("CapacityExceeded")) {
      st.condition({
        type: "CapacityExceeded",
        status: "False",
        reason: "Admitted",
        message: "a slot in the pool is free",
      });
    }
  }

  // Created, and its event is on the way (with a timer in case it never comes).
  if (!pod && ctx.podExpectations.pending(`${ns}/${a.podName}`)) return { requeueAfterMs: 1_000 };

  if (!pod && pool && !sbx.status?.podName && !sbx.status?.readyAt && !ctx.adoptedPods.has(key)) {
    const adopted = await tryAdopt(ctx, sbx, pool, eff, a.token, st);
    if (adopted) {
      sandboxReadySeconds.observe(
        { start: "warm" },
        (Date.now() - Date.parse(sbx.metadata.creationTimestamp!)) / 1000,
      );
      sandboxTransitions.inc({ reason: "Ready" });
      return { requeueAfterMs: nextDeadline(eff, st, a.expiresAt, now) };
    }
  }

  if (!pod) return createPod(ctx, sbx, eff, st, a, now, resuming);

  if (pod.metadata.deletionTimestamp) {
    st.phaseIs("Starting", "PodTerminating", "waiting for the previous pod to terminate");
    return;
  }
  if (pod.status?.phase === "Failed" || pod.status?.phase === "Succeeded") {
    const why = pod.status.reason ?? pod.status.phase;
    ctx.events.record(
      sbx,
      "Warning",
      "PodFailed",
      "Recreate",
      `pod ${a.podName} ${why}: ${pod.status.message ?? ""}`.trim(),
    );
    await ctx.kube.delete(PODS, ns, a.podName, { uid: pod.metadata.uid! });
    st.phaseIs("Starting", "PodFailed", `pod ${why}; recreating it`).set({ endpoint: undefined });
    return;
  }

  const ip = pod.status?.podIP;
  if (!ip || !containerRunning(pod)) return notServingYet(ctx, sbx, st, pod, now);
  // A fresh container gets a close watch (sandboxd answers within a second); one that has run
  // for a while without answering is checked less and less often, so a node full of broken
  // sandboxes does not keep the operator busy.
  const runningFor =
    now - (Date.parse(pod.status?.containerStatuses?.[0]?.state?.running?.startedAt ?? "") || now);
  const fresh = runningFor < 10_000;
  if (!(await waitHealthy(ip, fresh ? 2_000 : 300, a.signal))) {
    const retryMs = fresh ? 250 : Math.min(30_000, Math.round(runningFor / 4));
    return slowStart(
      st,
      now,
      "SandboxdStarting",
      "sandboxd does not answer its health check yet",
      retryMs,
    );
  }

  // sandboxd needs its token, environment or packages handed over: after a warm adoption, a
  // container restart of an adopted pod, or when the spec lists packages.
  const initFor = `${pod.metadata.uid}/${restartCount(pod)}`;
  const adopted = a.podName !== sbx.metadata.name;
  if (st.current.initializedFor === `failed:${initFor}`) return; // Failed until spec or pod change
  if ((adopted || eff.packages.length > 0) && st.current.initializedFor !== initFor) {
    const tokens = [
      await a.token,
      ...(pool ? [warmToken(ctx, pool)].filter((t): t is string => !!t) : []),
    ];
    try {
      await init(
        ip,
        adopted ? tokens.reverse() : tokens,
        {
          token: await a.token,
          env: eff.env,
          packages: packageSpecs(eff.language, eff.packages),
          language: eff.language,
        },
        600_000,
      );
    } catch (err) {
      if (!(err instanceof InitRejected)) throw err; // unreachable or interrupted: retry
      // sandboxd refused (a package that does not install): retrying cannot help until the
      // spec changes or the pod is replaced.
      if (st.phase !== "Failed") {
        ctx.events.record(sbx, "Warning", "PackageInstallFailed", "GiveUp", err.message);
        sandboxTransitions.inc({ reason: "Failed" });
      }
      st.phaseIs("Failed", "PackageInstallFailed", err.message).set({
        endpoint: undefined,
        initializedFor: `failed:${initFor}`,
      });
      return;
    }
    st.set({ initializedFor: initFor });
  }

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
  return { requeueAfterMs: nextDeadline(eff, st, a.expiresAt, now) };
}

async function createPod(
  ctx: Ctx,
  sbx: Sandbox,
  eff: Effective,
  st: SandboxStatusBuilder,
  a: RunArgs,
  now: number,
  resuming: boolean,
): Promise<ReconcileResult | void> {
  const ns = sbx.metadata.namespace!;
  // A pod that vanished or failed while the sandbox should run: recreate with backoff, then give up.
  const vanished = st.current.startedAt !== undefined && !resuming;
  let recreations = st.current.recreations ?? 0;
  if (vanished) {
    if (st.phase === "Failed") return;
    if (recreations >= ctx.cfg.maxRecreations) {
      const message = `the pod failed or disappeared ${recreations + 1} times without becoming ready; fix the cause and change the spec to retry`;
      ctx.events.record(sbx, "Warning", "Failed", "GiveUp", message);
      sandboxTransitions.inc({ reason: "Failed" });
      st.phaseIs("Failed", "TooManyRecreations", message).set({ endpoint: undefined });
      return;
    }
    const backoff = Math.min(1000 * 2 ** recreations, MAX_RECREATE_BACKOFF_MS);
    const lastStart = Date.parse(st.current.startedAt!);
    if (now < lastStart + backoff) {
      st.phaseIs(
        "Starting",
        "PodRecreating",
        `the pod is gone; recreating it in ${Math.ceil((lastStart + backoff - now) / 1000)}s`,
      );
      return { requeueAfterMs: lastStart + backoff - now };
    }
    recreations++;
    ctx.events.record(
      sbx,
      "Warning",
      "PodRecreated",
      "Recreate",
      `pod ${a.podName} was gone; recreating it (attempt ${recreations})`,
    );
  }

  const claimName = `${a.podName}-data`;
  await ensureClaim(ctx, sbx, eff, claimName);
  const claim = ctx.caches.claims.get(claimName, ns);
  if (claim?.status?.phase !== "Bound") {
    const age = now - Date.parse(claim?.metadata.creationTimestamp ?? st.now);
    if (age < BIND_WAIT_MS) return { requeueAfterMs: BIND_WAIT_MS - age }; // the bind event comes first
  }

  const labels: Record<string, string> = { [LABEL.sandbox]: sbx.metadata.name };
  if (sbx.spec.poolRef) labels[LABEL.pool] = sbx.spec.poolRef;
  await a.token; // the pod reads its token from the Secret: it must exist first
  // Expected before the write: its add event may arrive before the write returns.
  const podKey = `${ns}/${a.podName}`;
  ctx.podExpectations.expect(podKey);
  try {
    await ctx.kube.apply(
      PODS,
      podManifest(
        { name: a.podName, namespace: ns, owner: sbx, labels },
        eff,
        { tokenSecret: `${sbx.metadata.name}-token`, claimName },
        ctx.cfg,
      ),
    );
  } catch (err) {
    ctx.podExpectations.observed(podKey);
    throw err;
  }
  if (resuming)
    ctx.events.record(
      sbx,
      "Normal",
      "Resuming",
      "Start",
      `starting pod ${a.podName} on volume ${claimName}`,
    );
  // A first start says nothing until it is slow (the Ready write records when it started):
  // one status write fewer per sandbox. A restart is recorded at once, for the backoff.
  const firstStart = !vanished && !resuming && st.phase === undefined;
  if (firstStart && now - Date.parse(sbx.metadata.creationTimestamp!) < QUIET_START_MS) {
    return { requeueAfterMs: QUIET_START_MS };
  }
  st.set({
    startedAt: st.now,
    recreations: recreations || undefined,
    endpoint: undefined,
    initializedFor: undefined,
  });
  st.phaseIs("Starting", "PodCreated", `pod ${a.podName} created`);
  return { requeueAfterMs: QUIET_START_MS };
}

/** The pod is not serving: say why, once it has been long enough to matter. */
function notServingYet(
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
    if (st.phase !== "Failed") {
      ctx.events.record(sbx, "Warning", "Failed", "GiveUp", message);
      sandboxTransitions.inc({ reason: "Failed" });
    }
    st.phaseIs("Failed", "CrashLoopBackOff", message).set({ endpoint: undefined });
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
function slowStart(
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

interface Suspension {
  reason: "UserRequested" | "IdleTimeout" | "Evicted";
  message: string;
}

function suspensionOf(
  ctx: Ctx,
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
  const key = keyOf(sbx);
  const lastActivity = Date.parse(sbx.status?.lastActivityTime ?? "") || 0;
  const suspended = st.conditionOf("Suspended");
  // The eviction is durable once the cache shows it; until then the ledger's mark stands, so a
  // reconcile on a stale cache cannot take the slot back.
  if (suspended?.status === "True" && suspended.reason === "Evicted") ctx.admission.evicted(key);
  if (ctx.admission.isEvicting(key)) {
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

/** When the next timer (expiry or idle timeout) fires. */
function nextDeadline(
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

export function poolView(ctx: Ctx, pool: SandboxPool) {
  const ns = pool.metadata.namespace!;
  return {
    maxActive: pool.spec.maxActive,
    policy: pool.spec.evictionPolicy ?? "LRU",
    running: () =>
      ctx.caches.sandboxes
        .list(ns)
        .filter((s) => s.spec.poolRef === pool.metadata.name && !s.metadata.deletionTimestamp)
        .filter((s) => ctx.caches.pods.get(s.status?.podName ?? s.metadata.name, ns) !== undefined)
        .map(keyOf),
    lastActive: (key: string) => {
      const [, name] = splitKey(key);
      const s = ctx.caches.sandboxes.get(name, ns);
      return Math.max(
        Date.parse(s?.status?.lastActivityTime ?? "") || 0,
        Date.parse(s?.status?.readyAt ?? "") || 0,
        Date.parse(s?.metadata.creationTimestamp ?? "") || 0,
      );
    },
  } as const;
}

/** A pod adopted from the warm pool carries this sandbox's label but the pool's pod name. */
function adoptedPodName(ctx: Ctx, sbx: Sandbox): string | undefined {
  return ctx.caches.pods
    .list(sbx.metadata.namespace)
    .find(
      (p) =>
        p.metadata.labels?.[LABEL.sandbox] === sbx.metadata.name &&
        p.metadata.name !== sbx.metadata.name,
    )?.metadata.name;
}

const meta = (sbx: Sandbox, name: string) => ({
  name,
  namespace: sbx.metadata.namespace!,
  owner: sbx,
  labels: {
    [LABEL.sandbox]: sbx.metadata.name,
    ...(sbx.spec.poolRef ? { [LABEL.pool]: sbx.spec.poolRef } : {}),
  },
});

/** The token is minted once and never rewritten: created, not applied. */
async function ensureTokenSecret(ctx: Ctx, sbx: Sandbox): Promise<string> {
  const ns = sbx.metadata.namespace!;
  const name = `${sbx.metadata.name}-token`;
  const existing = ctx.caches.secrets.get(name, ns);
  if (existing?.data?.token) return Buffer.from(existing.data.token, "base64").toString();
  const token = newToken();
  try {
    await ctx.kube.create(SECRETS, tokenSecret(meta(sbx, name), token));
    return token;
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
    const secret = await ctx.kube.get<{
      metadata: { name: string };
      data?: Record<string, string>;
    }>(SECRETS, ns, name);
    return Buffer.from(secret.data?.token ?? "", "base64").toString();
  }
}

async function ensureService(ctx: Ctx, sbx: Sandbox): Promise<void> {
  if (ctx.caches.services.get(sbx.metadata.name, sbx.metadata.namespace)) return;
  await expected(ctx, `services/${keyOf(sbx)}`, () =>
    ctx.kube.apply(
      SERVICES,
      service(meta(sbx, sbx.metadata.name), { [LABEL.sandbox]: sbx.metadata.name }),
    ),
  );
}

async function ensureNetworkPolicy(ctx: Ctx, sbx: Sandbox, eff: Effective): Promise<void> {
  const desired = networkPolicy(
    meta(sbx, sbx.metadata.name),
    { [LABEL.sandbox]: sbx.metadata.name },
    eff.network,
    ctx.cfg,
  );
  const current = ctx.caches.networkPolicies.get(sbx.metadata.name, sbx.metadata.namespace);
  const hash = desired.metadata.annotations?.[ANNOTATION.specHash];
  if (current?.metadata.annotations?.[ANNOTATION.specHash] === hash) return;
  await expected(ctx, `networkpolicies/${keyOf(sbx)}/${hash}`, () =>
    ctx.kube.apply(NETWORK_POLICIES, desired),
  );
}

async function ensureClaim(ctx: Ctx, sbx: Sandbox, eff: Effective, name: string): Promise<void> {
  if (ctx.caches.claims.get(name, sbx.metadata.namespace)) return;
  await expected(ctx, `persistentvolumeclaims/${sbx.metadata.namespace}/${name}`, async () => {
    try {
      await ctx.kube.create(PVCS, dataClaim(meta(sbx, name), eff));
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
  });
}

/**
 * Writes a child once: until the cache shows it (the manager marks it observed), a reconcile
 * that runs meanwhile does not write it again.
 */
async function expected(ctx: Ctx, key: string, write: () => Promise<unknown>): Promise<void> {
  if (ctx.writeExpectations.pending(key)) return;
  ctx.writeExpectations.expect(key);
  try {
    await write();
  } catch (err) {
    ctx.writeExpectations.observed(key);
    throw err;
  }
}

/** Finishes an adoption interrupted between claiming the warm pod and taking over its volume. */
async function ensureAdoptedClaim(ctx: Ctx, sbx: Sandbox, name: string): Promise<void> {
  const claim = ctx.caches.claims.get(name, sbx.metadata.namespace);
  if (!claim || claim.metadata.ownerReferences?.some((o) => o.uid === sbx.metadata.uid)) return;
  try {
    await ctx.kube.patch(PVCS, sbx.metadata.namespace, name, "merge", {
      metadata: {
        labels: { [LABEL.sandbox]: sbx.metadata.name },
        ownerReferences: [
          {
            apiVersion: sbx.apiVersion,
            kind: sbx.kind,
            name: sbx.metadata.name,
            uid: sbx.metadata.uid,
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
      },
    });
  } catch (err) {
    if (!isConflict(err)) throw err;
  }
}
