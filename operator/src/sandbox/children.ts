/**
 * The writes that make a sandbox's children exist: its token Secret, volume and Pod, and the
 * namespace's network policies it needs. No Service: nothing reaches sandboxd by one (the
 * provisioner and the operator, the only clients the policies admit, use the pod's address from
 * the status). Each writes only when the cache shows the child missing or changed, and
 * remembers what it wrote until the cache catches up, so a reconcile on a lagging cache never
 * writes the same child twice.
 */
import { LABEL } from "../api/labels.ts";
import { dataClaimName, tokenSecretName } from "../api/names.ts";
import type { Sandbox } from "../api/v1alpha1.ts";
import type { Ctx } from "../context.ts";
import { PODS, PVCS, type Pod, SECRETS } from "../kube/resources.ts";
import { type KObject, type Resource, isAlreadyExists, isConflict } from "../kube/rest.ts";
import {
  controlledByAnother,
  controllerRef,
  dataClaim,
  legacyTokenSecret,
  newToken,
  pod as podManifest,
  tokenSecret,
} from "../workload/manifests.ts";
import { deleteOwnPolicy, ensureNetwork, relabel } from "../network/policies.ts";
import { reservedSandboxToken } from "../pool/warm.ts";
import { networkKey } from "../workload/network.ts";
import { policyProbeFor } from "../workload/egress.ts";
import type { ClaimMount } from "../workload/mounts.ts";
import type { Effective } from "../workload/spec.ts";

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
export async function ensureTokenSecret(ctx: Ctx, sbx: Sandbox): Promise<string> {
  const ns = sbx.metadata.namespace!;
  const name = tokenSecretName(sbx.metadata.name);
  const existing = ctx.caches.secrets.get(name, ns);
  if (existing?.data?.token) return Buffer.from(existing.data.token, "base64").toString();
  // A sandbox answered from a reserved warm pod already has its token (derived from its uid).
  const token = (await reservedSandboxToken(ctx, sbx)) ?? newToken();
  try {
    await ctx.kube.create(SECRETS, tokenSecret(meta(sbx, name), token));
    return token;
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
    const secret = await ctx.kube.get<KObject & { data?: Record<string, string> }>(
      SECRETS,
      ns,
      name,
    );
    // A deleted namesake's token, which the cache did not show yet: never this sandbox's.
    if (controlledByAnother(secret, sbx)) {
      throw new Error(`Secret ${name} is a deleted sandbox's; retrying once it is gone`, {
        cause: err,
      });
    }
    return Buffer.from(secret.data?.token ?? "", "base64").toString();
  }
}

/**
 * The namespace's policies this sandbox's network needs (network/policies.ts), and its pod
 * carrying its network key: a pod made before keys, or whose sandbox's network changed, is
 * relabeled, and a policy of the sandbox's own (made before policies were shared) deleted once
 * its pod no longer needs it.
 */
export async function isolate(ctx: Ctx, sbx: Sandbox, eff: Effective, podName: string) {
  const ns = sbx.metadata.namespace!;
  const key = await ensureNetwork(ctx, ns, eff.network);
  const found = ctx.caches.pods.get(podName, ns);
  // A warm pod not claimed yet gets its key with the claim, never before.
  const pod = found && controlledBy(found, sbx) ? found : undefined;
  if (pod) await relabel(ctx, pod, key);
  const own = ctx.caches.networkPolicies.get(sbx.metadata.name, ns);
  if (own && controlledBy(own, sbx) && (!found || pod)) await deleteOwnPolicy(ctx, own);
}

const controlledBy = (o: KObject, owner: KObject) =>
  o.metadata.ownerReferences?.some((r) => r.controller && r.uid === owner.metadata.uid) ?? false;

export async function ensureClaim(
  ctx: Ctx,
  sbx: Sandbox,
  eff: Effective,
  name: string,
): Promise<void> {
  if (ctx.caches.claims.get(name, sbx.metadata.namespace)) return;
  await ctx.writeExpectations.once(
    `persistentvolumeclaims/${sbx.metadata.namespace}/${name}`,
    async () => {
      try {
        await ctx.kube.create(PVCS, dataClaim(meta(sbx, name), eff));
      } catch (err) {
        if (!isAlreadyExists(err)) throw err;
      }
    },
  );
}

/** Finishes an adoption interrupted between claiming the warm pod and taking over its volume. */
export async function ensureAdoptedClaim(ctx: Ctx, sbx: Sandbox, podName: string): Promise<void> {
  const name = dataClaimName(podName);
  const claim = ctx.caches.claims.get(name, sbx.metadata.namespace);
  if (!claim || claim.metadata.ownerReferences?.some((o) => o.uid === sbx.metadata.uid)) return;
  try {
    await ctx.kube.patch(PVCS, sbx.metadata.namespace, name, "merge", {
      metadata: {
        labels: { [LABEL.sandbox]: sbx.metadata.name },
        ownerReferences: [controllerRef(sbx)],
      },
    });
  } catch (err) {
    if (!isConflict(err)) throw err;
  }
}

/** Creates the sandbox's own pod with its claims; the token Secret must exist already. */
export async function createPod(
  ctx: Ctx,
  sbx: Sandbox,
  eff: Effective,
  podName: string,
  mounts: ClaimMount[],
): Promise<void> {
  const ns = sbx.metadata.namespace!;
  const labels: Record<string, string> = {
    [LABEL.sandbox]: sbx.metadata.name,
    [LABEL.network]: networkKey(eff.network, ctx.cfg),
  };
  if (sbx.spec.poolRef) labels[LABEL.pool] = sbx.spec.poolRef;
  // Expected before the write: its add event may arrive before the write returns.
  const podKey = `${ns}/${podName}`;
  ctx.podExpectations.expect(podKey);
  try {
    await ctx.kube.apply(
      PODS,
      podManifest(
        { name: podName, namespace: ns, owner: sbx, labels },
        eff,
        {
          token: {
            secret: tokenSecretName(sbx.metadata.name),
            legacy: legacyTokenSecret(
              ctx.caches.secrets.get(tokenSecretName(sbx.metadata.name), ns),
            ),
          },
          mounts,
          isolationProbe: policyProbeFor(ctx.policyProbe(), eff.network),
        },
        ctx.cfg,
      ),
    );
  } catch (err) {
    ctx.podExpectations.observed(podKey);
    throw err;
  }
}

/**
 * A Sandbox deleted and at once created again under its name finds its predecessor's children
 * under the names its own get, until the garbage collector has removed them. None may be used
 * (a token that is no longer valid, a claim about to vanish under a new pod): each is deleted
 * now rather than whenever the collector gets to it, and the caller waits until it is gone (its
 * delete event requeues the sandbox). Returns those still in the way.
 */
export async function clearPrevious(
  ctx: Ctx,
  sbx: Sandbox,
  found: [Resource, KObject | undefined][],
): Promise<KObject[]> {
  const previous = found.filter(([, o]) => controlledByAnother(o, sbx)) as [Resource, KObject][];
  await Promise.all(
    previous.map(async ([r, o]) => {
      if (o.metadata.deletionTimestamp) return;
      try {
        await ctx.kube.delete(r, o.metadata.namespace, o.metadata.name, { uid: o.metadata.uid! });
      } catch (err) {
        if (!isConflict(err)) throw err; // gone and replaced meanwhile: the next pass sees it
      }
    }),
  );
  return previous.map(([, o]) => o);
}

/** Deletes the pod unless it is already going; its volume stays. */
export async function stopPod(ctx: Ctx, pod: Pod | undefined): Promise<void> {
  if (!pod || pod.metadata.deletionTimestamp) return;
  await ctx.kube.delete(PODS, pod.metadata.namespace, pod.metadata.name, {
    uid: pod.metadata.uid!,
  });
}
