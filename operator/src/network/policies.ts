/**
 * Makes a namespace's shared network policies exist (workload/network.ts says what they are):
 * the isolation policy and the egress policy of a network key, each written only when the cache
 * shows it missing or different, and remembered until the cache catches up, so the sandboxes of
 * a burst write each once between them.
 */
import { ANNOTATION, LABEL } from "../api/labels.ts";
import type { Ctx } from "../context.ts";
import { NETWORK_POLICIES, PODS, type Pod } from "../kube/resources.ts";
import { type KObject, isConflict, isNotFound } from "../kube/rest.ts";
import { egressPolicy, isolationPolicy, networkKey } from "../workload/network.ts";
import type { Effective } from "../workload/spec.ts";

/**
 * The policies pods with `network` in `namespace` need, in force before it resolves (as the
 * API server has them; the node's enforcer follows); resolves with their network key.
 */
export async function ensureNetwork(
  ctx: Ctx,
  namespace: string,
  network: Effective["network"],
): Promise<string> {
  const egress = egressPolicy(namespace, network, ctx.cfg, ctx.clusterAddresses());
  await Promise.all(
    [isolationPolicy(namespace, ctx.cfg), egress].map(async (desired) => {
      if (!desired) return;
      const hash = desired.metadata.annotations?.[ANNOTATION.specHash];
      const current = ctx.caches.networkPolicies.get(desired.metadata.name, namespace);
      if (current?.metadata.annotations?.[ANNOTATION.specHash] === hash) return;
      await ctx.writeExpectations.once(
        `networkpolicies/${namespace}/${desired.metadata.name}/${hash}`,
        () => ctx.kube.apply(NETWORK_POLICIES, desired),
      );
    }),
  );
  return networkKey(network, ctx.cfg);
}

/**
 * Gives a running pod the network key its sandbox's network has now (the network changed, or
 * the pod was made before pods carried one): the egress policy of its old key stops selecting
 * it at the same moment the new one starts.
 */
export async function relabel(ctx: Ctx, pod: Pod, key: string): Promise<void> {
  if (pod.metadata.labels?.[LABEL.network] === key || pod.metadata.deletionTimestamp) return;
  try {
    await ctx.kube.patch(PODS, pod.metadata.namespace, pod.metadata.name, "merge", {
      metadata: { labels: { [LABEL.network]: key } },
    });
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

/**
 * Deletes a policy of the kind each sandbox or pool once had of its own, once nothing relies on
 * it any more (the caller says when): the shared policies now say the same.
 */
export async function deleteOwnPolicy(ctx: Ctx, policy: KObject | undefined): Promise<void> {
  if (!policy || policy.metadata.deletionTimestamp) return;
  try {
    await ctx.kube.delete(NETWORK_POLICIES, policy.metadata.namespace, policy.metadata.name, {
      uid: policy.metadata.uid!,
    });
  } catch (err) {
    if (!isConflict(err)) throw err; // another object by that name now: not this one
  }
}
