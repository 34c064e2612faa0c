/**
 * What the controllers share: the API client, the informer caches, the event recorder, the
 * writes not yet seen and the ways to enqueue each other's keys.
 */
import type { Logger } from "pino";
import type { Sandbox, SandboxPool } from "./api/v1alpha1.ts";
import type { OperatorConfig } from "./config.ts";
import type { EventRecorder } from "./kube/events.ts";
import type { Informer } from "./kube/informer.ts";
import type { Claim, EndpointSlice, Node, Pod, Secret, StorageClass } from "./kube/resources.ts";
import type { KObject, Kube } from "./kube/rest.ts";

export interface Caches {
  sandboxes: Informer<Sandbox>;
  pools: Informer<SandboxPool>;
  pods: Informer<Pod>;
  claims: Informer<Claim>;
  secrets: Informer<Secret>;
  networkPolicies: Informer<KObject>;
  /** Every Node, cluster-wide: their addresses are excluded from Internet egress. */
  nodes: Informer<Node>;
  /** The `kubernetes` Service's EndpointSlices in `default`: the API server's addresses. */
  apiServerEndpoints: Informer<EndpointSlice>;
  /** Every StorageClass (a handful): whether a sandbox's volume holds its size. */
  storageClasses: Informer<StorageClass>;
}

/**
 * Writes the caches have not caught up with yet (controller-runtime calls them expectations):
 * a pod just created is not "missing", so it is not created again.
 */
export class Expectations {
  readonly #pending = new Map<string, number>();
  readonly #ttlMs: number;
  #sweepAt = 1_000;
  constructor(ttlMs = 30_000) {
    this.#ttlMs = ttlMs;
  }
  expect(key: string): void {
    const now = performance.now();
    this.#pending.set(key, now);
    // A write whose object was never seen (it existed already, or went at once) and is not
    // asked about again would stay: expired ones go whenever the map has doubled since.
    if (this.#pending.size > this.#sweepAt) {
      for (const [k, at] of this.#pending) if (now - at > this.#ttlMs) this.#pending.delete(k);
      this.#sweepAt = Math.max(1_000, 2 * this.#pending.size);
    }
  }
  /** Writes remembered, expired ones included until the next sweep. */
  get size(): number {
    return this.#pending.size;
  }
  observed(key: string): void {
    this.#pending.delete(key);
  }
  /**
   * Runs `write` unless a write under `key` is still expected: until the cache shows its object
   * (the manager marks it observed), a reconcile that runs meanwhile does not write it again.
   */
  async once(key: string, write: () => Promise<unknown>): Promise<void> {
    if (this.pending(key)) return;
    this.expect(key);
    try {
      await write();
    } catch (err) {
      this.observed(key);
      throw err;
    }
  }
  pending(key: string): boolean {
    const at = this.#pending.get(key);
    if (at === undefined) return false;
    if (performance.now() - at > this.#ttlMs) {
      this.#pending.delete(key);
      return false;
    }
    return true;
  }
}

export interface Ctx {
  kube: Kube;
  cfg: OperatorConfig;
  log: Logger;
  events: EventRecorder;
  caches: Caches;
  /** Pods created but not yet seen in the cache, by namespace/name. */
  podExpectations: Expectations;
  /** Services, NetworkPolicies (by spec hash) and PVCs written but not yet seen in the cache. */
  writeExpectations: Expectations;
  /**
   * Sandboxes (by uid) whose Starting status was written within the last PROGRESS_EVERY_MS
   * (sandbox/status.ts): their progress alone is not written again until then.
   */
  progressShown: Expectations;
  /**
   * The nodes' and the API server's addresses Internet egress excludes (workload/egress.ts), as
   * the caches show them now; the manager requeues every sandbox and pool when they change.
   */
  clusterAddresses: () => readonly string[];
  /**
   * What sandboxd probes to learn that its pod's network policy holds (SANDBOXD_ISOLATION_PROBE),
   * from SANDPIT_POLICY_PROBE: the API server's endpoint as last seen, the configured host:port,
   * or undefined (`off`, or no endpoint seen yet).
   */
  policyProbe: () => string | undefined;
  enqueueSandbox: (key: string, afterMs?: number) => void;
  enqueuePool: (key: string, afterMs?: number) => void;
}

export const keyOf = (o: KObject) => `${o.metadata.namespace ?? ""}/${o.metadata.name}`;
export function splitKey(key: string): [string, string] {
  const i = key.indexOf("/");
  return [key.slice(0, i), key.slice(i + 1)];
}
