/**
 * What SandboxPools add to the sandboxes that belong to them, held in memory by the leader: the
 * maxActive ledger and the warm pods being claimed and adopted. It implements PoolMembership,
 * the one way the sandbox reconciler reaches pool semantics.
 */
import type { Sandbox, SandboxPool } from "../api/v1alpha1.ts";
import type { Pod } from "../kube/resources.ts";
import { type Ctx, keyOf, splitKey } from "../context.ts";
import type { Adoption, PoolMembership } from "../sandbox/membership.ts";
import { controlledByAnother } from "../workload/manifests.ts";
import type { Effective } from "../workload/spec.ts";
import { PoolAdmission, type PoolView } from "./admission.ts";
import { Holders } from "./holders.ts";
import { type Claims, tryAdopt, warmTokenOf } from "./warm.ts";

export class Pools implements PoolMembership {
  readonly admission = new PoolAdmission();
  readonly #ctx: Ctx;
  readonly #claims: Claims;
  readonly #warmCreating = new Map<string, Set<string>>();

  constructor(ctx: Ctx) {
    this.#ctx = ctx;
    this.#claims = { claiming: new Set(), adopted: new Map(), holders: new Holders(ctx.kube) };
  }

  /** Which provisioner replicas holding warm-pod reservations are alive. */
  get holders(): Holders {
    return this.#claims.holders;
  }

  admit(sbx: Sandbox, pool: SandboxPool): boolean {
    const admission = this.admission.admit(keyOf(pool), keyOf(sbx), this.view(pool));
    if (!admission.admitted) return false;
    for (const victim of admission.victims) this.#ctx.enqueueSandbox(victim);
    return true;
  }

  release(sbx: Sandbox, pool: SandboxPool): void {
    for (const k of this.admission.release(keyOf(pool), keyOf(sbx))) this.#ctx.enqueueSandbox(k);
  }

  evicting(sbx: Sandbox, shown: boolean): boolean {
    if (shown) this.admission.evicted(keyOf(sbx));
    return this.admission.isEvicting(keyOf(sbx));
  }

  /**
   * A pod adopted from the warm pool keeps the pool's pod name; it is this sandbox's by owner uid.
   * Its name label is no proof: a deleted sandbox of the same name leaves pods that carry it.
   */
  adoptedPod(sbx: Sandbox): string | undefined {
    const uid = sbx.metadata.uid!;
    return (
      this.#claims.adopted.get(uid) ??
      this.#ctx.caches.pods
        .list(sbx.metadata.namespace)
        .find(
          (p) =>
            p.metadata.name !== sbx.metadata.name &&
            p.metadata.ownerReferences?.some((o) => o.controller && o.uid === uid),
        )?.metadata.name
    );
  }

  adopt(
    sbx: Sandbox,
    pool: SandboxPool,
    eff: Effective,
    token: Promise<string>,
    isolated: Promise<unknown>,
    signal: AbortSignal,
  ): Promise<Adoption | undefined> {
    return tryAdopt(this.#ctx, this.#claims, sbx, pool, eff, token, isolated, signal);
  }

  async podTokens(pool: SandboxPool, pod: Pod): Promise<string[]> {
    const token = await warmTokenOf(this.#ctx, pool, pod);
    return token ? [token] : [];
  }

  /** A sandbox is gone: its slot, its eviction mark and its adoption go with it. */
  forget(sbx: Sandbox): void {
    this.#claims.adopted.delete(sbx.metadata.uid!);
    if (!sbx.spec.poolRef) return;
    const poolKey = `${sbx.metadata.namespace}/${sbx.spec.poolRef}`;
    for (const k of this.admission.release(poolKey, keyOf(sbx))) this.#ctx.enqueueSandbox(k);
    this.admission.evicted(keyOf(sbx));
  }

  /** Names of warm pods the pool created that its cache may not show yet. */
  warmCreating(poolKey: string): Set<string> {
    let set = this.#warmCreating.get(poolKey);
    if (!set) this.#warmCreating.set(poolKey, (set = new Set()));
    return set;
  }

  /** The pool as its admission ledger sees it. */
  view(pool: SandboxPool): PoolView {
    const ctx = this.#ctx;
    const ns = pool.metadata.namespace!;
    return {
      maxActive: pool.spec.maxActive,
      policy: pool.spec.evictionPolicy ?? "LRU",
      running: () =>
        ctx.caches.sandboxes
          .list(ns)
          .filter((s) => s.spec.poolRef === pool.metadata.name && !s.metadata.deletionTimestamp)
          .filter((s) => {
            const pod = ctx.caches.pods.get(s.status?.podName ?? s.metadata.name, ns);
            return pod !== undefined && !controlledByAnother(pod, s);
          })
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
    };
  }
}
