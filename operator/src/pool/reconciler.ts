/**
 * The SandboxPool reconciler: keeps `warm` claimable pods (rolling them over when the template
 * changes, never dropping below what is ready), holds the pool within maxActive when the cap is
 * lowered, and reports the pool's counts.
 */
import { randomBytes } from "node:crypto";
import { ANNOTATION, LABEL } from "../api/labels.ts";
import { dataClaimName } from "../api/names.ts";
import { packageSpec } from "../api/packages.ts";
import { POOLS, type SandboxPool } from "../api/v1alpha1.ts";
import type { ReconcileResult } from "../controller/controller.ts";
import { type Ctx, keyOf, splitKey } from "../context.ts";
import { type Condition, setCondition } from "../kube/conditions.ts";
import { canonical } from "../kube/canonical.ts";
import { keyFingerprint, warmPodToken } from "../api/reservations.ts";
import { PODS, PVCS, type Pod, SECRETS } from "../kube/resources.ts";
import { isNotFound } from "../kube/rest.ts";
import { dataClaim, pod as podManifest, tokenDigest } from "../workload/manifests.ts";
import { deleteOwnPolicy, ensureNetwork } from "../network/policies.ts";
import { networkKey } from "../workload/network.ts";
import { podReady, restartCount } from "../workload/pod-state.ts";
import { podMounts } from "../workload/mounts.ts";
import { policyProbeFor } from "../workload/egress.ts";
import { init } from "../workload/sandboxd.ts";
import { boundsViolation, effectiveSpec, shapeHash, warmable } from "../workload/spec.ts";
import type { Pools } from "./pools.ts";
import {
  claimable,
  cachedKeyFingerprint,
  ensureTokenKey,
  legacyWarmPod,
  legacyWarmSecretName,
  reclaimReservations,
  reservedByLive,
  sameKey,
  templateHash,
  tokenKey,
  warmPods,
  warmTokenOf,
} from "./warm.ts";

export async function reconcilePool(
  ctx: Ctx,
  pools: Pools,
  key: string,
  signal: AbortSignal,
): Promise<ReconcileResult | void> {
  const [ns, name] = splitKey(key);
  const pool = ctx.caches.pools.get(name, ns);
  if (!pool || pool.metadata.deletionTimestamp) {
    pools.admission.forgetPool(key); // its warm pods go with it (ownerReferences)
    return;
  }
  const template = effectiveSpec({}, pool.spec, ctx.cfg);
  const hash = templateHash(ctx, pool);
  const shape = shapeHash(template);

  // A lowered maxActive takes effect now, least recently active first.
  for (const victim of pools.admission.trim(key, pools.view(pool))) ctx.enqueueSandbox(victim);

  if ((warmable(template) && pool.spec.warm > 0) || warmPods(ctx, pool).length > 0) {
    await ensureTokenKey(ctx, ns);
    await ensureNetwork(ctx, ns, template.network);
    // The pool's own policy of old, once no warm pod is without its network key.
    const own = ctx.caches.networkPolicies.get(`${name}-warm`, ns);
    const ours = own?.metadata.ownerReferences?.some((r) => r.uid === pool.metadata.uid);
    if (ours && warmPods(ctx, pool).every((p) => p.metadata.labels?.[LABEL.network])) {
      await deleteOwnPolicy(ctx, own);
    }
  }

  // Reservations of provisioner replicas that are gone go back to the pool; while any stand,
  // the pool is looked at again, so a holder's death is noticed without any event.
  const reservations = await reclaimReservations(ctx, pools, pool);
  const held = await reservedByLive(ctx, pools, pool);

  const pods = warmPods(ctx, pool);
  // A pod made before warm tokens were per pod is replaced like one of an older template: it
  // stays claimable (opened with the pool's token) until its successor is ready. So is one made
  // under a token key since replaced, which nobody can open any more.
  const fingerprint = cachedKeyFingerprint(ctx, ns);
  const current = (p: Pod) =>
    p.metadata.annotations?.[ANNOTATION.templateHash] === hash &&
    !legacyWarmPod(p) &&
    (fingerprint === undefined || sameKey(p, fingerprint));
  const fresh = pods.filter(current);
  const stale = pods.filter((p) => !current(p));
  // A template outside the pool's own bounds gets no warm pods: its members are refused too.
  const outOfBounds = boundsViolation(template, pool.spec, ctx.cfg);
  const want = warmable(template) && !outOfBounds ? pool.spec.warm : 0;

  await installTemplatePackages(ctx, pool, fresh, signal);

  // Fill up with pods of the current template.
  const creates: Promise<void>[] = [];
  // Warm pods created but not in the cache yet count too, or a quick second pass would
  // create them again.
  const unseen = [...pools.warmCreating(key)].filter(
    (n) => !ctx.caches.pods.get(n, ns) && ctx.podExpectations.pending(`${ns}/${n}`),
  );
  pools.warmCreating(key).clear();
  for (const n of unseen) pools.warmCreating(key).add(n);
  for (let i = fresh.length + unseen.length; i < want; i++) {
    const podName = `${name}-${randomBytes(3).toString("hex")}`;
    pools.warmCreating(key).add(podName);
    ctx.podExpectations.expect(`${ns}/${podName}`);
    creates.push(
      createWarmPod(ctx, pool, podName, hash, shape).catch((err: unknown) => {
        ctx.podExpectations.observed(`${ns}/${podName}`);
        pools.warmCreating(key).delete(podName);
        throw err;
      }),
    );
  }
  await Promise.all(creates);

  // Too many fresh ones (warm lowered): drop the ones not ready first, never one a live
  // provisioner holds (it may be handing it to a create right now; it is released on shutdown).
  const surplus = fresh.length - want;
  const deletions: Pod[] = [];
  if (surplus > 0) {
    deletions.push(
      ...fresh
        .filter((p) => !held.has(p.metadata.name))
        .sort((a, b) => Number(podReady(a)) - Number(podReady(b)))
        .slice(0, surplus),
    );
  }
  // Rolling replacement: an old pod goes only when enough new ones are ready to stand in for it.
  const readyFresh = fresh.filter((p) => claimable(pool, p, shape)).length;
  const readyStale = stale.filter((p) => claimable(pool, p, shape));
  let removable = Math.max(0, readyFresh + readyStale.length - want);
  const unready = stale.filter((p) => !claimable(pool, p, shape));
  deletions.push(
    ...unready.filter(
      (p) => p.metadata.annotations?.[ANNOTATION.shapeHash] !== shape || readyFresh >= want,
    ),
  );
  for (const p of readyStale) {
    if (removable-- <= 0) break;
    deletions.push(p);
  }
  await Promise.all(
    deletions.map((p) => ctx.kube.delete(PODS, ns, p.metadata.name, { uid: p.metadata.uid! })),
  );
  await retireLegacyWarmSecret(ctx, pool);

  await writePoolStatus(ctx, pools, pool, {
    warmReady: pods.filter((p) => !deletions.includes(p) && claimable(pool, p, shape)).length,
    warmable: warmable(template),
    rolling: stale.length > 0,
    outOfBounds,
  });
  const settling = pods.some((p) => !podReady(p)) || stale.length > 0 || reservations > 0;
  return settling ? { requeueAfterMs: 5_000 } : undefined;
}

/**
 * Deletes the pool-wide warm token Secret of an installation from before warm tokens were per
 * pod, once no pod of the pool uses it: no warm pod made then is left, nor a sandbox that
 * adopted one (its container, restarted, reads the digest from the Secret again).
 */
async function retireLegacyWarmSecret(ctx: Ctx, pool: SandboxPool): Promise<void> {
  const ns = pool.metadata.namespace!;
  const secret = ctx.caches.secrets.get(legacyWarmSecretName(pool), ns);
  if (!secret) return;
  const used = ctx.caches.pods.list(ns).some(
    (p) =>
      p.metadata.labels?.[LABEL.pool] === pool.metadata.name &&
      p.metadata.annotations?.[ANNOTATION.templateHash] !== undefined && // made as a warm pod
      legacyWarmPod(p),
  );
  if (used) return;
  try {
    await ctx.kube.delete(SECRETS, ns, secret.metadata.name, { uid: secret.metadata.uid! });
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

async function createWarmPod(
  ctx: Ctx,
  pool: SandboxPool,
  podName: string,
  hash: string,
  shape: string,
): Promise<void> {
  const ns = pool.metadata.namespace!;
  const e = effectiveSpec({}, pool.spec, ctx.cfg);
  const resolved = podMounts(e, {}, dataClaimName(podName));
  // Only warmable templates get warm pods, and theirs name no user or thread.
  if ("problem" in resolved) throw new Error(resolved.problem);
  const { mounts } = resolved;
  // The pod's own warm token, derived (warmPodToken): the pod is given its digest as a plain
  // value, so no Secret is written for it and the digest opens nothing.
  const tokenId = randomBytes(16).toString("hex");
  const key = await tokenKey(ctx, ns);
  const token = warmPodToken(key, ns, podName, tokenId);
  const labels = { [LABEL.pool]: pool.metadata.name };
  await ctx.kube.create(
    PVCS,
    dataClaim({ name: dataClaimName(podName), namespace: ns, owner: pool, labels }, e),
  );
  await ctx.kube.apply(
    PODS,
    podManifest(
      {
        name: podName,
        namespace: ns,
        owner: pool,
        labels: {
          ...labels,
          [LABEL.warm]: "true",
          [LABEL.network]: networkKey(e.network, ctx.cfg),
        },
      },
      e,
      {
        token: { digest: tokenDigest(token) },
        mounts,
        annotations: {
          [ANNOTATION.templateHash]: hash,
          [ANNOTATION.shapeHash]: shape,
          [ANNOTATION.warmTokenId]: tokenId,
          [ANNOTATION.warmTokenKey]: keyFingerprint(key),
        },
        isolationProbe: policyProbeFor(ctx.policyProbe(), e.network),
      },
      ctx.cfg,
    ),
  );
}

/** Warm pods install the template's packages once they serve, then are marked claimable. */
async function installTemplatePackages(
  ctx: Ctx,
  pool: SandboxPool,
  pods: Pod[],
  signal: AbortSignal,
): Promise<void> {
  const packages = pool.spec.template.packages ?? [];
  if (!packages.length) return;
  const language = pool.spec.template.language ?? "python";
  await Promise.all(
    pods
      .filter((p) => podReady(p) && p.status?.podIP)
      .filter(
        (p) =>
          p.metadata.annotations?.[ANNOTATION.packagesReady] !==
          `${p.metadata.uid}/${restartCount(p)}`,
      )
      .map(async (p) => {
        const token = await warmTokenOf(ctx, pool, p);
        if (!token) return; // an old pod whose pool Secret is gone: replaced, never claimable
        await init(
          p.status!.podIP!,
          [token],
          { token, packages: packages.map((p) => packageSpec(language, p)), language },
          signal,
        );
        await ctx.kube.patch(PODS, p.metadata.namespace, p.metadata.name, "merge", {
          metadata: {
            annotations: { [ANNOTATION.packagesReady]: `${p.metadata.uid}/${restartCount(p)}` },
          },
        });
      }),
  );
}

async function writePoolStatus(
  ctx: Ctx,
  pools: Pools,
  pool: SandboxPool,
  s: { warmReady: number; warmable: boolean; rolling: boolean; outOfBounds: string | undefined },
): Promise<void> {
  const key = keyOf(pool);
  const now = new Date().toISOString();
  const active = pools.admission.activeCount(key) ?? pools.view(pool).running().length;
  const evictions = ctx.caches.sandboxes
    .list(pool.metadata.namespace)
    .filter((sb) => sb.spec.poolRef === pool.metadata.name)
    .filter((sb) => sb.status?.conditions?.some((c) => c.type === "Evicted")).length;
  let conditions = (pool.status?.conditions ?? []) as Condition[];
  const gen = pool.metadata.generation;
  conditions = setCondition(
    conditions,
    s.outOfBounds
      ? {
          type: "Ready",
          status: "False",
          reason: "TemplateOutOfBounds",
          message: `the template breaks the pool's resource bounds (${s.outOfBounds}): no warm sandboxes are kept and members are Failed`,
        }
      : !s.warmable && pool.spec.warm > 0
        ? {
            type: "Ready",
            status: "True",
            reason: "WarmNotApplicable",
            message:
              "the template gives each sandbox a directory of its own user or thread (storage.sharedClaim, or a mount's subPath naming {user} or {thread}), which a pod made ahead of its sandbox cannot know: no warm sandboxes are kept and members start cold",
          }
        : s.warmReady >= pool.spec.warm
          ? {
              type: "Ready",
              status: "True",
              reason: "WarmPoolFilled",
              message: `${s.warmReady} warm sandboxes ready`,
            }
          : {
              type: "Ready",
              status: "False",
              reason: "WarmingUp",
              message: `${s.warmReady} of ${pool.spec.warm} warm sandboxes ready`,
            },
    gen,
    now,
  );
  conditions = setCondition(
    conditions,
    s.rolling
      ? {
          type: "Progressing",
          status: "True",
          reason: "ReplacingWarm",
          message: "replacing warm sandboxes made from an older template",
        }
      : {
          type: "Progressing",
          status: "False",
          reason: "UpToDate",
          message: "every warm sandbox is made from the current template",
        },
    gen,
    now,
  );
  conditions = setCondition(
    conditions,
    active >= pool.spec.maxActive
      ? {
          type: "AtCapacity",
          status: "True",
          reason: "MaxActiveReached",
          message: `${active} of ${pool.spec.maxActive} sandboxes active`,
        }
      : {
          type: "AtCapacity",
          status: "False",
          reason: "BelowMaxActive",
          message: `${active} of ${pool.spec.maxActive} sandboxes active`,
        },
    gen,
    now,
  );
  const status = {
    active,
    warmReady: s.warmReady,
    evictions: Math.max(evictions, pool.status?.evictions ?? 0),
    conditions,
    observedGeneration: gen,
  };
  if (canonical(pool.status ?? {}) === canonical(status)) return;
  const { name, namespace, resourceVersion } = pool.metadata;
  await ctx.kube.apply(
    POOLS,
    { metadata: { name, namespace: namespace!, resourceVersion }, status },
    "status",
  );
}
