/**
 * Warm sandboxes: pods a pool starts ahead of demand (with their volumes), owned by the pool and
 * labelled warm, which a new Sandbox of the pool adopts instead of starting cold.
 *
 * Adoption is one optimistic-locked patch of the pod (labels and owner move to the Sandbox; the
 * resourceVersion precondition makes two claimants of one pod impossible), one patch of its
 * volume, and one /v1/init call that gives sandboxd the Sandbox's own token, environment and
 * extra packages. Nothing restarts, so the Sandbox is Ready in milliseconds.
 */
import type { Ctx, Pod, Sandbox, SandboxPool } from "../context.ts";
import { isConflict, isNotFound } from "../kube/client.ts";
import { PODS, PVCS } from "../kube/resources.ts";
import {
  ANNOTATION,
  type Effective,
  LABEL,
  controllerRef,
  effectiveSpec,
  hashOf,
  podShape,
} from "../sandbox/children.ts";
import { podReady, restartCount } from "../sandbox/pod-state.ts";
import { init, packageSpecs } from "../sandbox/sandboxd.ts";
import { READY_MESSAGE, READY_REASON } from "../sandbox/reconciler.ts";
import type { SandboxStatusBuilder } from "../sandbox/status.ts";

export const warmSecretName = (pool: SandboxPool) => `${pool.metadata.name}-warm-token`;

export function warmToken(ctx: Ctx, pool: SandboxPool): string | undefined {
  const s = ctx.caches.secrets.get(warmSecretName(pool), pool.metadata.namespace);
  return s?.data?.token ? Buffer.from(s.data.token, "base64").toString() : undefined;
}

/** The hash that says which template a warm pod was made from. */
export function templateHash(ctx: Ctx, pool: SandboxPool): string {
  const e = effectiveSpec({}, pool.spec, ctx.cfg);
  return hashOf({
    shape: podShape(e),
    env: e.env,
    packages: e.packages,
    language: e.language,
    network: e.network,
  });
}

/** Warm pods of the pool, not being deleted, not yet claimed. */
export function warmPods(ctx: Ctx, pool: SandboxPool): Pod[] {
  return ctx.caches.pods
    .list(pool.metadata.namespace)
    .filter(
      (p) =>
        p.metadata.labels?.[LABEL.pool] === pool.metadata.name &&
        p.metadata.labels?.[LABEL.warm] === "true" &&
        !p.metadata.deletionTimestamp,
    );
}

/** The hash of what a pod is made of; a warm pod serves sandboxes whose shape matches it. */
export const shapeHash = (e: Effective) => hashOf(podShape(e));

/**
 * Ready to be claimed: serving, packages installed, and of the right shape (image, limits,
 * storage, runtime class). A pod from an older template of the same shape still qualifies, so
 * a rolling template change never leaves the pool without claimable pods; /v1/init brings its
 * environment and packages up to date.
 */
export function claimable(pool: SandboxPool, pod: Pod, shape: string): boolean {
  if (!podReady(pod) || pod.metadata.annotations?.[ANNOTATION.shapeHash] !== shape) return false;
  const needsPackages = (pool.spec.template.packages?.length ?? 0) > 0;
  return (
    !needsPackages ||
    pod.metadata.annotations?.[ANNOTATION.packagesReady] ===
      `${pod.metadata.uid}/${restartCount(pod)}`
  );
}

/**
 * Adopts a warm pod for `sbx` when one fits (same image, limits, storage and runtime class as
 * the template). Returns false when none is free, and the caller starts a cold pod.
 */
export async function tryAdopt(
  ctx: Ctx,
  sbx: Sandbox,
  pool: SandboxPool,
  eff: Effective,
  token: Promise<string>,
  st: SandboxStatusBuilder,
): Promise<boolean> {
  const template = effectiveSpec({}, pool.spec, ctx.cfg);
  const shape = shapeHash(eff);
  if (shape !== shapeHash(template)) return false; // the sandbox overrides the pod's shape
  const poolToken = warmToken(ctx, pool);
  if (!poolToken) return false;
  const ns = sbx.metadata.namespace!;
  for (let attempt = 0; attempt < 3; attempt++) {
    const candidate = warmPods(ctx, pool).find(
      (p) => !ctx.claiming.has(p.metadata.uid!) && claimable(pool, p, shape),
    );
    if (!candidate) return false;
    const uid = candidate.metadata.uid!;
    ctx.claiming.add(uid); // no other reconcile in this process picks it meanwhile
    try {
      // The claim and the token Secret's creation (by the caller) run at the same time.
      const [claimed, tok] = await Promise.all([claim(ctx, sbx, candidate), token]);
      if (!claimed) continue;
      // Remembered at once: if what follows fails, the retry must find this pod, not claim another.
      ctx.adoptedPods.set(`${ns}/${sbx.metadata.name}`, candidate.metadata.name);
      // Packages already installed are skipped by pip and npm; only the extra ones cost time.
      const current =
        candidate.metadata.annotations?.[ANNOTATION.templateHash] === templateHash(ctx, pool);
      const have = new Set(current ? template.packages.map((p) => p.name) : []);
      const extra = eff.packages.filter((p) => !have.has(p.name));
      await Promise.all([
        ctx.kube.patch(PVCS, ns, `${candidate.metadata.name}-data`, "merge", {
          metadata: {
            labels: { [LABEL.sandbox]: sbx.metadata.name },
            ownerReferences: [controllerRef(sbx)],
          },
        }),
        init(
          claimed.status!.podIP!,
          [poolToken, tok],
          {
            token: tok,
            env: eff.env,
            packages: packageSpecs(eff.language, extra),
            language: eff.language,
          },
          600_000,
        ),
      ]);
      const ip = claimed.status!.podIP!;
      ctx.events.record(
        sbx,
        "Normal",
        "Adopted",
        "Claim",
        `adopted warm pod ${candidate.metadata.name} from pool ${pool.metadata.name}`,
      );
      st.set({
        podName: candidate.metadata.name,
        startedAt: st.now,
        readyAt: st.now,
        endpoint: `${ip}:8080`,
        initializedFor: `${uid}/${restartCount(claimed)}`,
      });
      st.phaseIs("Ready", READY_REASON, READY_MESSAGE);
      ctx.enqueuePool(`${ns}/${pool.metadata.name}`); // replace the warm pod just taken
      return true;
    } finally {
      ctx.claiming.delete(uid);
    }
  }
  return false;
}

/** Moves the pod to the sandbox, unless someone else changed it first. */
async function claim(ctx: Ctx, sbx: Sandbox, pod: Pod): Promise<Pod | undefined> {
  try {
    return await ctx.kube.patch<Pod>(PODS, pod.metadata.namespace, pod.metadata.name, "merge", {
      metadata: {
        resourceVersion: pod.metadata.resourceVersion,
        labels: { [LABEL.warm]: null, [LABEL.sandbox]: sbx.metadata.name },
        ownerReferences: [controllerRef(sbx)],
      },
    });
  } catch (err) {
    if (isConflict(err) || isNotFound(err)) return undefined;
    throw err;
  }
}
