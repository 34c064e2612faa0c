/**
 * Collects the egress policies nothing uses any more (workload/network.ts): one whose network
 * key no pod of its namespace carries, and no Sandbox or pool there would give a pod, is
 * deleted a while after its last pod went. Keys are `namespace/policy name`.
 *
 * A sandbox that starts as its policy is being deleted loses no isolation (the namespace's
 * isolation policy selects its pod whatever happens to this one); it would lose its egress, so
 * the manager requeues every sandbox and pool of the namespace when a shared policy is deleted,
 * and their reconciles make it again.
 */
import { LABEL } from "../api/labels.ts";
import type { ReconcileResult } from "../controller/controller.ts";
import { type Ctx, splitKey } from "../context.ts";
import { NETWORK_POLICIES } from "../kube/resources.ts";
import { isConflict } from "../kube/rest.ts";
import { networkKey } from "../workload/network.ts";
import { effectiveSpec } from "../workload/spec.ts";

/** How long an egress policy outlives its last pod: a pool replacing its pods keeps it. */
export const UNUSED_GRACE_MS = 60_000;

export async function reconcileEgressPolicy(
  ctx: Ctx,
  key: string,
): Promise<ReconcileResult | void> {
  const [ns, name] = splitKey(key);
  const policy = ctx.caches.networkPolicies.get(name, ns);
  const networkOf = policy?.metadata.labels?.[LABEL.network];
  if (!policy || !networkOf || policy.metadata.deletionTimestamp) return;
  if (inUse(ctx, ns, networkOf)) return;
  const age = Date.now() - Date.parse(policy.metadata.creationTimestamp ?? "");
  if (!(age >= UNUSED_GRACE_MS)) return { requeueAfterMs: UNUSED_GRACE_MS - (age || 0) };
  ctx.log.info({ namespace: ns, policy: name }, "deleting an egress policy no pod uses");
  try {
    await ctx.kube.delete(NETWORK_POLICIES, ns, name, { uid: policy.metadata.uid! });
  } catch (err) {
    if (!isConflict(err)) throw err;
  }
}

/** Whether a pod carries the key, or a Sandbox or pool of the namespace would give one it. */
function inUse(ctx: Ctx, ns: string, key: string): boolean {
  if (ctx.caches.pods.list(ns).some((p) => p.metadata.labels?.[LABEL.network] === key)) return true;
  const pools = new Map(ctx.caches.pools.list(ns).map((p) => [p.metadata.name, p]));
  for (const pool of pools.values()) {
    if (networkKey(effectiveSpec({}, pool.spec, ctx.cfg).network, ctx.cfg) === key) return true;
  }
  return ctx.caches.sandboxes.list(ns).some((s) => {
    if (s.metadata.deletionTimestamp) return false;
    const pool = s.spec.poolRef ? pools.get(s.spec.poolRef) : undefined;
    return networkKey(effectiveSpec(s.spec, pool?.spec, ctx.cfg).network, ctx.cfg) === key;
  });
}
