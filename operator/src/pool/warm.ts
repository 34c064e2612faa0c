/**
 * Warm sandboxes: pods a pool starts ahead of demand (with their volumes), owned by the pool and
 * labelled warm, which a new Sandbox of the pool adopts instead of starting cold.
 *
 * Adoption is one optimistic-locked patch of the pod (labels and owner move to the Sandbox; the
 * resourceVersion precondition makes two claimants of one pod impossible), one patch of its
 * volume, and one /v1/init call that gives sandboxd the Sandbox's own token, environment and
 * extra packages. Nothing restarts, so the Sandbox is Ready in milliseconds.
 *
 * A provisioner replica may hold warm pods reserved (../api/reservations.ts): such a pod is
 * adopted only by the Sandbox that names it, and the rest of the pool's members never take it
 * while its holder lives. The provisioner has usually initialised it already; the adoption's
 * /v1/init then simply repeats what the provisioner sent, under the sandbox's own token.
 */
import { ANNOTATION, LABEL, MANAGED_BY } from "../api/labels.ts";
import { dataClaimName } from "../api/names.ts";
import { packageSpec } from "../api/packages.ts";
import {
  RESERVATION,
  TOKEN_KEY_SECRET,
  derivedToken,
  faultPoint,
  keyFingerprint,
  warmPodToken,
} from "../api/reservations.ts";
import type { Sandbox, SandboxPool } from "../api/v1alpha1.ts";
import type { Ctx } from "../context.ts";
import { PODS, PVCS, type Pod, SECRETS, type Secret } from "../kube/resources.ts";
import { isAlreadyExists, isConflict, isNotFound } from "../kube/rest.ts";
import type { Adoption } from "../sandbox/membership.ts";
import { controllerRef, newToken } from "../workload/manifests.ts";
import { networkKey } from "../workload/network.ts";
import { podReady, restartCount } from "../workload/pod-state.ts";
import { init } from "../workload/sandboxd.ts";
import type { Holders } from "./holders.ts";
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
  /** Which reservation holders are alive. */
  holders: Holders;
}

/**
 * The pool-wide warm token of warm pods made before warm tokens were per pod (they read its
 * digest from this Secret). No pod is made with it any more; it goes once no pod of the pool
 * uses it (reconciler.ts, retireLegacyWarmSecret).
 */
export const legacyWarmSecretName = (pool: SandboxPool) => `${pool.metadata.name}-warm-token`;

function legacyWarmToken(ctx: Ctx, pool: SandboxPool): string | undefined {
  const s = ctx.caches.secrets.get(legacyWarmSecretName(pool), pool.metadata.namespace);
  return s?.data?.token ? Buffer.from(s.data.token, "base64").toString() : undefined;
}

/** A pod of the pool made before warm tokens were per pod: its sandboxd took the pool's token. */
export function legacyWarmPod(pod: Pod): boolean {
  return !pod.metadata.annotations?.[ANNOTATION.warmTokenId];
}

/**
 * The token a warm pod's sandboxd was started with, whether still warm or adopted since (a
 * container restart brings it back): its own, derived from the key, its name and its token id;
 * the pool's for a pod made before that. Undefined when it cannot be had (an old pod whose
 * pool Secret is gone).
 */
export async function warmTokenOf(
  ctx: Ctx,
  pool: SandboxPool,
  pod: Pod,
): Promise<string | undefined> {
  const id = pod.metadata.annotations?.[ANNOTATION.warmTokenId];
  if (!id) return legacyWarmToken(ctx, pool);
  const ns = pod.metadata.namespace!;
  const key = await tokenKey(ctx, ns);
  // Made under a key since replaced: its token cannot be had any more.
  if (!sameKey(pod, keyFingerprint(key))) return undefined;
  return warmPodToken(key, ns, pod.metadata.name, id);
}

/** Whether the warm pod's token was derived from the key of that fingerprint. */
export function sameKey(pod: Pod, fingerprint: string): boolean {
  const made = pod.metadata.annotations?.[ANNOTATION.warmTokenKey];
  return made === undefined || made === fingerprint;
}

/** The fingerprint of the namespace's token key, when the cache shows it. */
export function cachedKeyFingerprint(ctx: Ctx, ns: string): string | undefined {
  const key = ctx.caches.secrets.get(TOKEN_KEY_SECRET, ns)?.data?.key;
  return key ? keyFingerprint(Buffer.from(key, "base64").toString()) : undefined;
}

/** Whether this process can open the warm pod at all (see warmTokenOf). */
function openable(ctx: Ctx, pool: SandboxPool, pod: Pod): boolean {
  if (legacyWarmPod(pod)) return legacyWarmToken(ctx, pool) !== undefined;
  const fingerprint = cachedKeyFingerprint(ctx, pod.metadata.namespace!);
  return fingerprint === undefined || sameKey(pod, fingerprint);
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
  isolated: Promise<unknown>,
  signal: AbortSignal,
): Promise<Adoption | undefined> {
  // A sandbox whose directories depend on its user or thread starts cold: no pod made before
  // it could have them.
  if (!warmable(eff)) return undefined;
  const template = effectiveSpec({}, pool.spec, ctx.cfg);
  const shape = shapeHash(eff);
  if (shape !== shapeHash(template)) return undefined; // the sandbox overrides the pod's shape
  const ns = sbx.metadata.namespace!;
  let handed = sbx.metadata.annotations?.[RESERVATION.pod];
  // Pods other Sandboxes name were handed to them, reserved or not by now.
  const named = namedPods(ctx, ns);
  for (let attempt = 0; attempt < 3; attempt++) {
    // The pod its create was handed, while it can be adopted, and no other: the provisioner
    // answered the create with it and may have initialised it already. After a failed claim
    // (a status update moves its resourceVersion too) it is read again from the API.
    const reserved = handed ? await reservedPod(ctx, sbx, pool, attempt > 0) : undefined;
    if (!reserved) handed = undefined; // gone, taken or given back: not asked for again
    // The pod as it is now, reservation and resourceVersion together: the claim below is
    // conditional on that version, so a reservation made after this look makes it fail.
    const candidate =
      reserved && !claims.claiming.has(reserved.metadata.uid!)
        ? reserved
        : firstFree(
            warmPods(ctx, pool).filter(
              (p) =>
                !claims.claiming.has(p.metadata.uid!) &&
                !named.has(p.metadata.name) &&
                claimable(pool, p, shape) &&
                openable(ctx, pool, p),
            ),
          );
    if (!candidate) return undefined;
    const uid = candidate.metadata.uid!;
    claims.claiming.add(uid); // no other reconcile in this process picks it meanwhile
    try {
      // The token Secret's creation (by the caller) and the policies of the sandbox's network
      // come first: the claim gives the pod the sandbox's network key (a sandbox may have
      // another network than its pool's template), whose egress policy must already be there.
      const [tok, warm] = await Promise.all([token, warmTokenOf(ctx, pool, candidate), isolated]);
      if (!warm) continue; // an old pod whose pool Secret is gone: the pool replaces it
      const claimed = await claim(ctx, sbx, candidate, networkKey(eff.network, ctx.cfg));
      if (!claimed) continue;
      ctx.log.debug(
        { sandbox: sbx.metadata.name, pod: candidate.metadata.name, handed, attempt },
        "claimed a warm pod",
      );
      faultPoint("operator-adopt-claimed");
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
          // A reserved pod the provisioner initialised already answers to the sandbox's token.
          candidate === reserved ? [tok, warm] : [warm, tok],
          {
            token: tok,
            env: eff.env,
            packages: extra.map((p) => packageSpec(eff.language, p)),
            language: eff.language,
          },
          signal,
        ),
      ]);
      faultPoint("operator-adopt-initialised");
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
async function claim(ctx: Ctx, sbx: Sandbox, pod: Pod, network: string): Promise<Pod | undefined> {
  try {
    return await ctx.kube.patch<Pod>(PODS, pod.metadata.namespace, pod.metadata.name, "merge", {
      metadata: {
        resourceVersion: pod.metadata.resourceVersion,
        labels: {
          [LABEL.warm]: null,
          [LABEL.sandbox]: sbx.metadata.name,
          [LABEL.network]: network,
        },
        ownerReferences: [controllerRef(sbx)],
      },
    });
  } catch (err) {
    if (isConflict(err) || isNotFound(err)) return undefined;
    throw err;
  }
}

/**
 * The warm pod a provisioner reserved and handed to `sbx` (the Sandbox names it and its holder),
 * while it is still warm and still reserved by that holder; else undefined, and the sandbox
 * adopts like any other. Alive or not, the holder gave it to this sandbox: the Sandbox is the
 * claim. A cache that does not show the reservation yet (the provisioner wrote it a moment ago)
 * is not believed, nor is it with `fresh`: the pod is read from the API.
 */
async function reservedPod(
  ctx: Ctx,
  sbx: Sandbox,
  pool: SandboxPool,
  fresh: boolean,
): Promise<Pod | undefined> {
  const name = sbx.metadata.annotations?.[RESERVATION.pod];
  const holder = sbx.metadata.annotations?.[RESERVATION.holder];
  if (!name || !holder) return undefined;
  const fits = (p: Pod | undefined): p is Pod =>
    !!p &&
    p.metadata.labels?.[LABEL.pool] === pool.metadata.name &&
    p.metadata.labels?.[LABEL.warm] === "true" &&
    !p.metadata.deletionTimestamp &&
    p.metadata.annotations?.[RESERVATION.holder] === holder &&
    podReady(p);
  const cached = fresh ? undefined : ctx.caches.pods.get(name, sbx.metadata.namespace);
  if (fits(cached)) return cached;
  try {
    const live = await ctx.kube.get<Pod>(PODS, sbx.metadata.namespace, name);
    return fits(live) ? live : undefined;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/**
 * The first of `pods` no provisioner replica reserved. A reserved pod is free only once the pool
 * reconciler gives it back (reclaimReservations): only it checks that no Sandbox names the pod,
 * which a dead holder may have handed out just before it died.
 */
function firstFree(pods: Pod[]): Pod | undefined {
  return pods.find((p) => !p.metadata.annotations?.[RESERVATION.holder]);
}

/** Names of the pool's warm pods reserved by a provisioner replica that is still alive. */
export async function reservedByLive(
  ctx: Ctx,
  claims: Pick<Claims, "holders">,
  pool: SandboxPool,
): Promise<Set<string>> {
  const held = new Set<string>();
  for (const p of warmPods(ctx, pool)) {
    const holder = p.metadata.annotations?.[RESERVATION.holder];
    if (holder && (await claims.holders.alive(pool.metadata.namespace!, holder)))
      held.add(p.metadata.name);
  }
  return held;
}

/**
 * Gives back warm pods reserved by a holder that is gone (crashed, or partitioned past its
 * Lease) and that no Sandbox names: a resourceVersion-guarded patch, so a pod claimed meanwhile
 * is left alone. A pod a Sandbox names is that sandbox's to adopt.
 *
 * Each pod is judged on one copy: its holder and its resourceVersion come from the same object.
 * Asking whether a holder is alive waits on the API, and meanwhile the cache moves on: a pod
 * judged unreserved then and read again after would be a pod a live replica has just reserved
 * (and may have handed to a create whose Sandbox this cache does not show yet). Given back with
 * the newer version, the patch went through, and the replica reserved the pod again for a
 * second create: one pod for two sandboxes, seen in a burst of 100 creates.
 */
export async function reclaimReservations(
  ctx: Ctx,
  claims: Pick<Claims, "holders">,
  pool: SandboxPool,
): Promise<number> {
  const ns = pool.metadata.namespace!;
  const named = namedPods(ctx, ns);
  const orphans: Pod[] = [];
  for (const p of warmPods(ctx, pool)) {
    const holder = p.metadata.annotations?.[RESERVATION.holder];
    if (!holder || named.has(p.metadata.name)) continue;
    if (!(await claims.holders.alive(ns, holder))) orphans.push(p);
  }
  await Promise.all(
    orphans.map(async (p) => {
      try {
        await ctx.kube.patch(PODS, ns, p.metadata.name, "merge", {
          metadata: {
            resourceVersion: p.metadata.resourceVersion,
            annotations: { [RESERVATION.holder]: null },
          },
        });
      } catch (err) {
        if (!isConflict(err) && !isNotFound(err)) throw err;
      }
    }),
  );
  return warmPods(ctx, pool).filter((p) => p.metadata.annotations?.[RESERVATION.holder]).length;
}

/** The warm pods Sandboxes name as the one a provisioner handed them (this cache's view). */
function namedPods(ctx: Ctx, ns: string): Set<string> {
  return new Set(
    ctx.caches.sandboxes
      .list(ns)
      .map((s) => s.metadata.annotations?.[RESERVATION.pod])
      .filter((n): n is string => !!n),
  );
}

/**
 * The key reserved sandboxes' and warm pods' tokens derive from, made once per namespace (never
 * rotated).
 */
export async function ensureTokenKey(ctx: Ctx, namespace: string): Promise<void> {
  if (ctx.caches.secrets.get(TOKEN_KEY_SECRET, namespace)) return;
  try {
    await ctx.kube.create<Secret>(SECRETS, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: {
        name: TOKEN_KEY_SECRET,
        namespace,
        labels: { [LABEL.managedBy]: MANAGED_BY.operator },
      },
      type: "Opaque",
      data: { key: Buffer.from(newToken()).toString("base64") },
    });
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
  }
}

/**
 * The token of a sandbox the provisioner answered for from a reserved pod: derived from its uid,
 * as the provisioner derived it. Undefined for every other sandbox (its token is random).
 */
export async function reservedSandboxToken(ctx: Ctx, sbx: Sandbox): Promise<string | undefined> {
  if (!sbx.metadata.annotations?.[RESERVATION.pod]) return undefined;
  return derivedToken(await tokenKey(ctx, sbx.metadata.namespace!), sbx.metadata.uid!);
}

/**
 * The key reserved sandboxes' and warm pods' tokens derive from. Whoever derived a token from it
 * read it first: if this cache does not show it yet, the API does.
 */
export async function tokenKey(ctx: Ctx, ns: string): Promise<string> {
  const secret =
    ctx.caches.secrets.get(TOKEN_KEY_SECRET, ns) ??
    (await ctx.kube.get<Secret>(SECRETS, ns, TOKEN_KEY_SECRET));
  const key = secret.data?.key;
  if (!key) throw new Error(`Secret ${TOKEN_KEY_SECRET} has no key`);
  return Buffer.from(key, "base64").toString();
}
