/**
 * What the controllers share: the API client, the informer caches, the pool ledger, the event
 * recorder and the ways to enqueue each other's keys.
 */
import type { Logger } from "pino";
import type {
  SandboxPoolSpec,
  SandboxPoolStatus,
  SandboxSpec,
  SandboxStatus,
} from "./api/v1alpha1.ts";
import type { OperatorConfig } from "./config.ts";
import type { KObject, Kube } from "./kube/client.ts";
import type { EventRecorder } from "./kube/events.ts";
import type { Informer } from "./kube/informer.ts";
import type { PoolAdmission } from "./pool/admission.ts";

export interface Sandbox extends KObject {
  spec: SandboxSpec;
  status?: SandboxStatus;
}
export interface SandboxPool extends KObject {
  spec: SandboxPoolSpec;
  status?: SandboxPoolStatus;
}
export interface Pod extends KObject {
  spec?: Record<string, unknown>;
  status?: {
    phase?: string;
    podIP?: string;
    reason?: string;
    message?: string;
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
    containerStatuses?: {
      restartCount: number;
      ready?: boolean;
      state?: {
        running?: { startedAt?: string };
        waiting?: { reason?: string; message?: string };
        terminated?: { reason?: string; exitCode?: number; message?: string };
      };
      lastState?: { terminated?: { reason?: string; exitCode?: number } };
    }[];
  };
}
export interface Claim extends KObject {
  status?: { phase?: string };
}
export interface Secret extends KObject {
  data?: Record<string, string>;
}

export interface Caches {
  sandboxes: Informer<Sandbox>;
  pools: Informer<SandboxPool>;
  pods: Informer<Pod>;
  claims: Informer<Claim>;
  services: Informer<KObject>;
  secrets: Informer<Secret>;
  networkPolicies: Informer<KObject>;
}

/**
 * Writes the caches have not caught up with yet (controller-runtime calls them expectations):
 * a pod just created is not "missing", so it is not created again.
 */
export class Expectations {
  readonly #pending = new Map<string, number>();
  readonly #ttlMs: number;
  constructor(ttlMs = 30_000) {
    this.#ttlMs = ttlMs;
  }
  expect(key: string): void {
    this.#pending.set(key, performance.now());
  }
  observed(key: string): void {
    this.#pending.delete(key);
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
  admission: PoolAdmission;
  /** Pods created but not yet seen in the cache, by namespace/name. */
  podExpectations: Expectations;
  /** Services, NetworkPolicies (by spec hash) and PVCs written but not yet seen in the cache. */
  writeExpectations: Expectations;
  /**
   * Sandbox key -> adopted warm pod, remembered until the sandbox goes: the caches may not show
   * the adoption yet, and a sandbox must never adopt twice.
   */
  adoptedPods: Map<string, string>;
  /** Names of warm pods a pool created that its cache may not show yet. */
  warmCreating: (poolKey: string) => Set<string>;
  /** UIDs of warm pods a reconcile is claiming right now. */
  claiming: Set<string>;
  enqueueSandbox: (key: string, afterMs?: number) => void;
  enqueuePool: (key: string, afterMs?: number) => void;
}

export const keyOf = (o: KObject) => `${o.metadata.namespace ?? ""}/${o.metadata.name}`;
export function splitKey(key: string): [string, string] {
  const i = key.indexOf("/");
  return [key.slice(0, i), key.slice(i + 1)];
}
