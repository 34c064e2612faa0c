/**
 * What the API layer needs of a sandbox store. Two implement it: `SandboxStore`
 * (./sandboxes.ts: Sandbox resources on Kubernetes, the operator running them) and
 * `ProviderStore` (./serve/provider-store.ts: an SDK provider, Docker or local, for
 * `sandpit serve`). Both hand out Sandpit's own Sandbox records, so every route renders the
 * same answers whichever store is behind it.
 *
 * Reads are synchronous (each store keeps what it knows in memory: an informer cache, or the
 * records serve rebuilt from the backend at start); writes and waits are not.
 */
import type { Quantities, Sandbox, SandboxPool, SandboxSpec } from "@sandpit/operator/api";

export interface CreateInput {
  tenant: string;
  /** How many sandboxes the tenant may hold; a create past it is refused (kind "quota"). */
  quota?: number;
  /** The API key's ceilings (its maxResources): a create past one is refused (400). */
  maxResources?: Quantities | undefined;
  /** A stable name for idempotent creates; random when undefined. */
  name?: string;
  pool?: string | undefined;
  spec: Omit<SandboxSpec, "poolRef">;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface SandboxBackend {
  /** Whether the store knows every sandbox yet (/readyz answers 503 until it does). */
  readonly isSynced: boolean;
  /** Resolves once the store knows every sandbox (rejects if the backend cannot say). */
  readonly synced: Promise<void>;
  start(): void;
  stop(): void;
  /** A tenant's sandbox by name; another tenant's is reported as missing. */
  get(tenant: string, name: string): Sandbox | undefined;
  /** Any tenant's sandbox: only for a capability URL, which the capability itself authorises. */
  getAnyTenant(name: string): Sandbox | undefined;
  /** A tenant's sandbox as the backend has it now (not a cache another replica may trail). */
  getLive(tenant: string, name: string): Promise<Sandbox | undefined>;
  /** Every tenant's sandboxes: only to find the one a signed E2B URL names. */
  listAllTenants(): Sandbox[];
  /** The SandboxPool of this name, if the store has pools (E2B templates name them). */
  getPool(name: string): Promise<SandboxPool | undefined>;
  /** A tenant's sandboxes carrying every one of `labels`. */
  list(tenant: string, labels?: Record<string, string>): Sandbox[];
  count(tenant: string): number;
  /** Creates the sandbox, or returns the existing one of the same name (idempotent). */
  create(input: CreateInput): Promise<{ sandbox: Sandbox; created: boolean }>;
  /**
   * Resolves with the sandbox once Ready (phase Ready with an endpoint); rejects with a
   * SandboxUnavailable when it failed, was deleted, or the deadline passed.
   */
  waitReady(name: string, timeoutMs: number, signal?: AbortSignal): Promise<Sandbox>;
  delete(name: string): Promise<void>;
  /** Changes the lifetime settings (a merge: fields not given keep their value). */
  setLifecycle(
    name: string,
    lifecycle: { ttlSeconds?: number; idleTimeoutSeconds?: number },
  ): Promise<Sandbox>;
  /** Pauses (data kept) or resumes the sandbox. */
  setSuspended(name: string, suspended: boolean): Promise<void>;
  /** Traffic to or from the sandbox: it is not idle. */
  reportActivity(name: string, force?: boolean): Promise<void>;
  /** sandboxd's bearer token of a Ready sandbox. */
  token(s: Sandbox): Promise<string>;
}
