/**
 * Warm sandboxes: pods a pool starts ahead of demand (with their volumes), owned by the pool and
 * labelled warm, which a new Sandbox of the pool adopts instead of starting cold.
 *
 * Adoption is one optimistic-locked patch of the pod (labels and owner move to the Sandbox; the
 * resourceVersion precondition makes two claimants of one pod impossible), one patch of its
 * volume, and one /v1/init call that gives sandboxd the Sandbox's own token, environment and
 * extra packages. Nothing restarts, so the Sandbox is Ready in milliseconds.
 */
import { ANNOTATION, LABEL } from "../api/labels.ts";
import { dataClaimName } from "../api/names.ts";
import { packageSpec } from "../api/packages.ts";
import type { Sandbox, SandboxPool } from "../api/v1alpha1.ts";
import type { Ctx } from "../context.ts";
import { PODS, PVCS, type Pod } from "../kube/resources.ts";
import { isConflict, isNotFound } from "../kube/rest.ts";
import type { Adoption } from "../sandbox/membership.ts";
import { controllerRef } from "../workload/manifests.ts";
import { podReady, restartCount } from "../workload/pod-state.ts";
import { init } from "../workload/sandboxd.ts";
import {
  type Effective,
  effectiveSpec,
  hashOf,
  podShape,
  shapeHash,
  warmable,
} from "../workload/spec.ts";

/** Warm pods being claimed and adopted, by this process. */
export interface Claims {
  /** UIDs of warm pods a reconcile is claiming right now. */
  claiming: Set<string>;
  /**
   * Sandbox uid -> adopted warm pod, remembered until the sandbox goes: the caches may not show
   * the adoption yet, and a sandbox must never adopt twice. By uid, not name: a sandbox deleted
   * and created again under its name is another sandbox.
   */
  adopted: Map<string, string>;
}

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
 * the template): claims it, takes over its volume and initialises sandboxd for the sandbox.
 * Returns what the sandbox's status needs, or undefined when none is free and the caller starts
 * a cold pod.
 */
export async function tryAdopt(
  ctx: Ctx,
  claims: Claims,
  sbx: Sandbox,
  pool: SandboxPool,
  eff: Effective,
  token: Promise<string>,
  signal: AbortSignal,
): Promise<Adoption | undefined> {
  // A sandbox whose directories depend on its user or thread starts cold: no pod made before
  // it could have them.
  if (!warmable(eff)) return undefined;
  const template = effectiveSpec({}, pool.spec, ctx.cfg);
  const shape = shapeHash(eff);
  if (shape !== shapeHash(template)) return undefined; // the sandbox overrides the pod's shape
  const poolToken = warmToken(ctx, pool);
  if (!poolToken) return undefined;
  const ns = sbx.metadata.namespace!;
  for (let attempt = 0; attempt < 3; attempt++) {
    const candidate = warmPods(ctx, pool).find(
      (p) => !claims.claiming.has(p.metadata.uid!) && claimable(pool, p, shape),
    );
    if (!candidate) return undefined;
    const uid = candidate.metadata.uid!;
    claims.claiming.add(uid); // no other reconcile in this process picks it meanwhile
    try {
      // The claim and the token Secret's creation (by the caller) run at the same time.
      const [claimed, tok] = await Promise.all([claim(ctx, sbx, candidate), token]);
      if (!claimed) continue;
      // Remembered at once: if what follows fails, the retry must find this pod, not claim another.
      claims.adopted.set(sbx.metadata.uid!, candidate.metadata.name);
      // Packages already installed are skipped by pip and npm; only the extra ones cost time.
      const current =
        candidate.metadata.annotations?.[ANNOTATION.templateHash] === templateHash(ctx, pool);
      const have = new Set(current ? template.packages.map((p) => p.name) : []);
      const extra = eff.packages.filter((p) => !have.has(p.name));
      const podIP = claimed.status!.podIP!;
      await Promise.all([
        ctx.kube.patch(PVCS, ns, dataClaimName(candidate.metadata.name), "merge", {
          metadata: {
            labels: { [LABEL.sandbox]: sbx.metadata.name },
            ownerReferences: [controllerRef(sbx)],
          },
        }),
        init(
          podIP,
          [poolToken, tok],
          {
            token: tok,
            env: eff.env,
            packages: extra.map((p) => packageSpec(eff.language, p)),
            language: eff.language,
          },
          signal,
        ),
      ]);
      ctx.events.record(
        sbx,
        "Normal",
        "Adopted",
        "Claim",
        `adopted warm pod ${candidate.metadata.name} from pool ${pool.metadata.name}`,
      );
      ctx.enqueuePool(`${ns}/${pool.metadata.name}`); // replace the warm pod just taken
      return {
        podName: candidate.metadata.name,
        podIP,
        initializedFor: `${uid}/${restartCount(claimed)}`,
      };
    } finally {
      claims.claiming.delete(uid);
    }
  }
  return undefined;
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
