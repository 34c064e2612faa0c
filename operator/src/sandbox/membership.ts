/**
 * What a SandboxPool adds to the reconcile of its members. The sandbox reconciler knows pools
 * only through this interface, which pool/pools.ts implements: the pool's cap and its warm pods
 * extend the core instead of being woven into it, and nothing here imports the pool's code.
 */
import type { Sandbox, SandboxPool } from "../api/v1alpha1.ts";
import type { Pod } from "../kube/resources.ts";
import type { Effective } from "../workload/spec.ts";

/** A warm pod a sandbox took over, initialised with its token, environment and packages. */
export interface Adoption {
  podName: string;
  podIP: string;
  /** The pod UID and restart count sandboxd was initialised for (status.initializedFor). */
  initializedFor: string;
}

export interface PoolMembership {
  /**
   * Takes or confirms a slot under the pool's maxActive, making room when the pool evicts (LRU);
   * false when the pool is full and rejects more (Reject): the sandbox waits.
   */
  admit(sbx: Sandbox, pool: SandboxPool): boolean;
  /** The sandbox stopped running (suspended, waiting): its slot goes to whoever waits for one. */
  release(sbx: Sandbox, pool: SandboxPool): void;
  /**
   * Whether the pool chose this sandbox to make room. `shown` says its status already holds the
   * eviction, which from then on stands by itself.
   */
  evicting(sbx: Sandbox, shown: boolean): boolean;
  /** The warm pod this sandbox adopted, also while the caches do not show the adoption yet. */
  adoptedPod(sbx: Sandbox): string | undefined;
  /**
   * Adopts a warm pod that fits `eff` (the one a provisioner reserved for it, if it names one);
   * undefined when none is free and the pod starts cold. `isolated` settles once the sandbox's
   * NetworkPolicy is written: the pod leaves the warm pods' policy only after that.
   */
  adopt(
    sbx: Sandbox,
    pool: SandboxPool,
    eff: Effective,
    token: Promise<string>,
    isolated: Promise<unknown>,
    signal: AbortSignal,
  ): Promise<Adoption | undefined>;
  /**
   * Tokens a member's sandboxd may still hold besides the sandbox's own: the warm token of the
   * pod it adopted (a container restart starts sandboxd with that token's digest again).
   */
  podTokens(pool: SandboxPool, pod: Pod): Promise<string[]>;
}
