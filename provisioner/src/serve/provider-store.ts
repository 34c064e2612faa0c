/**
 * The provisioner's store over an SDK provider (Docker or local) for `sandpit serve`: the same
 * Sandbox records, names, quotas and errors as the Kubernetes store (../sandboxes.ts), with the
 * provider doing what the operator does there.
 *
 * - One sandbox per name: a thread's sandbox has a name derived from (tenant, user, thread)
 *   (../sandboxes.ts), and concurrent creates of one name share one record, made synchronously
 *   before any await, so they get one sandbox.
 * - Everything a restart needs (name, tenant, labels, ids, spec, creation time) is written on the
 *   sandbox itself through the provider's create `labels` (Docker: container labels; local: its
 *   record in the state directory) and read back with `provider.list()` at start. No secret goes
 *   there: sandboxd's token stays with the backend, and the DeerFlow capability is derived
 *   (../capability.ts).
 * - Lifetimes are enforced here, as the operator does on Kubernetes: past its TTL a sandbox is
 *   deleted; idle past its idle timeout (no traffic through the proxy) it is paused, data kept,
 *   and the next request resumes it.
 */
import type { Logger } from "pino";
import {
  type SandboxCreateOptions,
  SandboxError,
  type SandboxInstance,
  type SandboxProvider,
  sandboxdConnection,
} from "@sandpit/sdk";
import { type PlatformBounds, packageSpec } from "@sandpit/operator/api";
import {
  type CreateInput,
  LABEL,
  type Sandbox,
  SandboxUnavailable,
  readiness,
} from "../sandboxes.ts";
import type { SandboxBackend } from "../store.ts";
import { ApiError } from "../api/errors.ts";
import { preconnect } from "../proxy.ts";
import { splitEndpoint } from "../transport.ts";
import { admitResources } from "../limits.ts";
import { type ServeSupport, refuseUnsupported } from "./platform.ts";
import { MAX_RECORD_BYTES, STATE_LABEL, recordLabels, recordOf } from "./record-labels.ts";
import { resourcesOf } from "./resources.ts";

/**
 * What is kept on the sandbox (./record-labels.ts): its Sandbox record but the status, and of
 * the spec not the environment (secrets, and the sandbox has it) nor the packages (installed).
 */
interface StoredRecord {
  name: string;
  tenant: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  spec: Omit<Sandbox["spec"], "env" | "packages">;
  createdAt: string;
}

interface Entry {
  sandbox: Sandbox;
  tenant: string;
  /** The provider's id, once it made the sandbox. */
  providerId: string | undefined;
  /** Held while the sandbox runs for this process. */
  instance: SandboxInstance | undefined;
  token: string | undefined;
  lastActivity: number;
  /** Transitions (create, pause, resume, delete) of one sandbox run one after another. */
  queue: Promise<unknown>;
}

export interface ProviderStoreOptions {
  provider: SandboxProvider;
  /** The serve state's id: on every sandbox it makes, and the provider's user id for them. */
  serveId: string;
  log: Logger;
  /** What of create's platform options the backend carries out; the rest is refused. */
  support: ServeSupport;
  /** Idle timeout of a sandbox that names none; 0 keeps idle sandboxes running. */
  idleTimeoutMs: number;
  /** How often lifetimes are checked. */
  reapIntervalMs?: number;
  /** The platform's resource bounds (../limits.ts): serve's SANDPIT_MIN_* / SANDPIT_MAX_*. */
  bounds: PlatformBounds;
}

export class ProviderStore implements SandboxBackend {
  readonly #o: ProviderStoreOptions;
  readonly #entries = new Map<string, Entry>();
  /** Deletions under way, by name: a create of the same name waits for it, then makes anew. */
  readonly #deleting = new Map<string, Promise<void>>();
  readonly #waiters = new Map<string, Set<(s: Sandbox | undefined) => void>>();
  #synced = false;
  #reaper: NodeJS.Timeout | undefined;
  #reaping = false;
  /** Resolves once the sandboxes the backend holds are known (rejects if it cannot say). */
  readonly synced: Promise<void>;
  #sync: () => Promise<void> = () => Promise.resolve();

  constructor(o: ProviderStoreOptions) {
    this.#o = o;
    this.synced = new Promise((resolve, reject) => {
      this.#sync = () => this.#load().then(resolve, reject);
    });
  }

  get isSynced(): boolean {
    return this.#synced;
  }

  start(): void {
    void this.#sync().catch((err: unknown) =>
      this.#o.log.error({ err }, "could not list the backend's sandboxes"),
    );
    this.#reaper = setInterval(() => {
      if (this.#reaping) return; // the last round is still ending sandboxes
      this.#reaping = true;
      void this.#reap().finally(() => (this.#reaping = false));
    }, this.#o.reapIntervalMs ?? 5_000);
    this.#reaper.unref();
  }

  stop(): void {
    clearInterval(this.#reaper);
  }

  /** Lets go of every sandbox (they keep running, or stay paused) and of the provider. */
  async close(): Promise<void> {
    this.stop();
    await Promise.allSettled([...this.#entries.values()].map((e) => e.queue));
    await this.#o.provider.close();
  }

  get(tenant: string, name: string): Sandbox | undefined {
    const e = this.#entries.get(name);
    return e && e.tenant === tenant ? e.sandbox : undefined;
  }

  getAnyTenant(name: string): Sandbox | undefined {
    return this.#entries.get(name)?.sandbox;
  }

  getLive(tenant: string, name: string): Promise<Sandbox | undefined> {
    return Promise.resolve(this.get(tenant, name));
  }

  list(tenant: string, labels: Record<string, string> = {}): Sandbox[] {
    return [...this.#entries.values()]
      .filter((e) => e.tenant === tenant)
      .map((e) => e.sandbox)
      .filter((s) => Object.entries(labels).every(([k, v]) => s.metadata.labels?.[k] === v));
  }

  count(tenant: string): number {
    let n = 0;
    for (const e of this.#entries.values()) if (e.tenant === tenant) n++;
    return n;
  }

  async create(input: CreateInput): Promise<{ sandbox: Sandbox; created: boolean }> {
    refuseUnsupported(this.#o.support, input);
    admitResources(input, undefined, this.#o.bounds); // serve has no pools
    const name = input.name ?? `sbx-${crypto.randomUUID().replace(/-/g, "").slice(0, 20)}`;
    const dying = this.#deleting.get(name);
    if (dying) await dying.catch(() => undefined);
    // From here to the record's insertion nothing awaits: concurrent creates of one name share it.
    const found = this.#entries.get(name);
    if (found) {
      if (found.tenant !== input.tenant)
        throw new SandboxUnavailable("failed", `sandbox name ${name} is taken`);
      return { sandbox: found.sandbox, created: false };
    }
    if (input.quota !== undefined && this.count(input.tenant) >= input.quota) {
      throw new SandboxUnavailable(
        "quota",
        `this API key may hold ${input.quota} sandboxes at once; delete some first`,
        30,
      );
    }
    const spec = input.spec as Sandbox["spec"];
    const { env: _env, packages: _packages, ...kept } = spec;
    const stored: StoredRecord = {
      name,
      tenant: input.tenant,
      labels: { ...input.labels },
      annotations: { ...input.annotations },
      spec: kept,
      createdAt: new Date().toISOString(),
    };
    const labels = recordLabels(this.#o.serveId, stored);
    if (!labels)
      throw new ApiError(
        "INVALID_ARGUMENT",
        `the sandbox's labels and ids are too long to keep on it (at most ${MAX_RECORD_BYTES} bytes as JSON)`,
      );
    const entry = this.#entry(stored, { phase: "Pending" });
    entry.sandbox.spec = spec;
    this.#entries.set(name, entry);
    void this.#serial(entry, () => this.#provision(entry, spec, labels));
    return { sandbox: entry.sandbox, created: true };
  }

  /** The record the routes render, from what is stored and the sandbox's current state. */
  #entry(stored: StoredRecord, status: Sandbox["status"], providerId?: string): Entry {
    const ttl = stored.spec.lifecycle?.ttlSeconds;
    const expiresAt = ttl
      ? new Date(Date.parse(stored.createdAt) + ttl * 1000).toISOString()
      : undefined;
    return {
      tenant: stored.tenant,
      providerId,
      instance: undefined,
      token: undefined,
      lastActivity: Date.now(),
      queue: Promise.resolve(),
      sandbox: {
        apiVersion: "sandpit.dev/v1alpha1",
        kind: "Sandbox",
        metadata: {
          name: stored.name,
          uid: stored.name,
          creationTimestamp: stored.createdAt,
          labels: { ...stored.labels, [LABEL.tenant]: stored.tenant },
          annotations: stored.annotations,
        },
        spec: stored.spec,
        status: { ...status, ...(expiresAt ? { expiresAt } : {}) },
      },
    };
  }

  /** Makes the sandbox with the provider; the record turns Ready or Failed. */
  async #provision(
    entry: Entry,
    spec: Sandbox["spec"],
    labels: Record<string, string>,
  ): Promise<void> {
    const name = entry.sandbox.metadata.name;
    const options: SandboxCreateOptions = {
      language: spec.language ?? "python",
      ...(spec.packages?.length
        ? { packages: spec.packages.map((p) => packageSpec(spec.language ?? "python", p)) }
        : {}),
      ...(spec.env?.length
        ? { envs: Object.fromEntries(spec.env.map((v) => [v.name, v.value ?? ""])) }
        : {}),
      ...(spec.resources ? { resources: resourcesOf(spec.resources) } : {}),
      ...(spec.network?.egress === "Deny" ? { network: "deny" as const } : {}),
      // The backend keeps the end too, so it holds across a restart of serve; the idle timeout
      // stays serve's alone (only serve sees the traffic through its proxy).
      ...(spec.lifecycle?.ttlSeconds
        ? { lifetime: { ttlMs: spec.lifecycle.ttlSeconds * 1000 } }
        : {}),
      userId: this.#o.serveId,
      threadId: name,
      labels,
    };
    this.#set(entry, { phase: "Starting" });
    try {
      const instance = await this.#o.provider.create(options);
      entry.providerId = instance.sandboxId;
      await this.#attach(entry, instance);
    } catch (err) {
      this.#o.log.warn({ err, sandbox: name }, "sandbox failed to start");
      this.#fail(entry, err);
    }
  }

  /** The sandbox runs: its sandboxd's address and token become the record's. */
  async #attach(entry: Entry, instance: SandboxInstance): Promise<void> {
    const c = await sandboxdConnection(instance);
    entry.instance = instance;
    entry.token = c.token;
    entry.lastActivity = Date.now();
    const endpoint = c.socketPath ? `unix:${c.socketPath}` : new URL(c.baseUrl).host;
    // The proxy's connection opens while the create's answer travels, not on the first command.
    preconnect({ ...splitEndpoint(endpoint), token: c.token });
    this.#set(entry, { phase: "Ready", endpoint, readyAt: new Date().toISOString() });
  }

  #fail(entry: Entry, err: unknown): void {
    const message = err instanceof Error ? err.message : String(err);
    const packages =
      err instanceof SandboxError &&
      err.code === "EXECUTION_FAILED" &&
      /^installing /.test(message);
    this.#set(entry, {
      phase: "Failed",
      conditions: [
        {
          type: "Ready",
          status: "False",
          reason: packages ? "PackageInstallFailed" : "StartFailed",
          message: message.slice(0, 2000),
          lastTransitionTime: new Date().toISOString(),
        },
      ],
    });
  }

  /** Replaces the record's status (keeping its expiry) and tells whoever waits on it. */
  #set(entry: Entry, status: NonNullable<Sandbox["status"]>): void {
    const expiresAt = entry.sandbox.status?.expiresAt;
    entry.sandbox = {
      ...entry.sandbox,
      status: { ...status, ...(expiresAt ? { expiresAt } : {}) },
    };
    for (const w of this.#waiters.get(entry.sandbox.metadata.name) ?? []) w(entry.sandbox);
  }

  #serial(entry: Entry, op: () => Promise<void>): Promise<void> {
    const next = entry.queue.then(op, op);
    entry.queue = next.catch(() => undefined);
    return next;
  }

  async waitReady(name: string, timeoutMs: number, signal?: AbortSignal): Promise<Sandbox> {
    const verdict = (s: Sandbox | undefined) => readiness(name, s, "it did not start");
    const now = verdict(this.#entries.get(name)?.sandbox);
    if (now instanceof SandboxUnavailable) throw now;
    if (now) return now;
    return new Promise<Sandbox>((resolve, reject) => {
      const set = this.#waiters.get(name) ?? new Set();
      this.#waiters.set(name, set);
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        set.delete(check);
        if (!set.size) this.#waiters.delete(name);
      };
      const check = (s: Sandbox | undefined) => {
        const v = verdict(s);
        if (!v) return;
        done();
        if (v instanceof SandboxUnavailable) reject(v);
        else resolve(v);
      };
      const onAbort = () => {
        done();
        reject(new SandboxUnavailable("timeout", "the request was cancelled"));
      };
      const timer = setTimeout(() => {
        done();
        reject(
          new SandboxUnavailable(
            "timeout",
            `sandbox ${name} was not Ready within ${Math.round(timeoutMs / 1000)}s`,
            5,
          ),
        );
      }, timeoutMs);
      signal?.addEventListener("abort", onAbort, { once: true });
      set.add(check);
    });
  }

  /**
   * Removes the sandbox: gone from every answer at once, its backend sandbox killed (a paused
   * one is resumed for that, as the provider kills through an instance).
   */
  async delete(name: string): Promise<void> {
    const entry = this.#entries.get(name);
    if (!entry) return;
    this.#entries.delete(name);
    for (const w of this.#waiters.get(name) ?? []) w(undefined);
    const gone = this.#serial(entry, async () => {
      const id = entry.providerId;
      if (!id) return; // it never started
      try {
        await (entry.instance ?? (await this.#o.provider.resume(id))).kill();
      } catch (err) {
        if (!(err instanceof SandboxError && err.code === "NOT_FOUND")) throw err;
      }
    });
    this.#deleting.set(name, gone);
    try {
      await gone;
    } finally {
      if (this.#deleting.get(name) === gone) this.#deleting.delete(name);
    }
  }

  async setSuspended(name: string, suspended: boolean): Promise<void> {
    const entry = this.#entries.get(name);
    if (!entry) throw new SandboxUnavailable("failed", `sandbox ${name} was deleted`);
    await this.#serial(entry, async () => {
      const phase = entry.sandbox.status?.phase;
      if (suspended) {
        if (phase !== "Ready" || !entry.instance) return;
        await entry.instance.pause();
        entry.instance = entry.token = undefined;
        this.#set(entry, { phase: "Suspended" });
      } else if (phase === "Suspended" || (phase === "Starting" && !entry.instance)) {
        this.#set(entry, { phase: "Starting" });
        try {
          await this.#attach(entry, await this.#o.provider.resume(entry.providerId!));
        } catch (err) {
          this.#fail(entry, err);
          throw err;
        }
      }
    });
  }

  /**
   * Changes the lifetime settings (a merge: fields not given keep their value). A new TTL is
   * handed to the backend too (the provider's setTimeout), which keeps it across a restart.
   */
  async setLifecycle(
    name: string,
    lifecycle: { ttlSeconds?: number; idleTimeoutSeconds?: number },
  ): Promise<Sandbox> {
    const entry = this.#entries.get(name);
    if (!entry) throw new SandboxUnavailable("failed", `sandbox ${name} was deleted`);
    const s = entry.sandbox;
    const suspended = s.spec.lifecycle?.suspended ?? false;
    entry.sandbox = {
      ...s,
      spec: { ...s.spec, lifecycle: { ...s.spec.lifecycle, ...lifecycle, suspended } },
    };
    if (lifecycle.ttlSeconds !== undefined) {
      const end = Date.parse(s.metadata.creationTimestamp!) + lifecycle.ttlSeconds * 1000;
      this.#setEnd(entry, end);
      await this.#serial(entry, async () => {
        const left = () => Math.max(1000, end - Date.now());
        if (entry.instance) return entry.instance.setTimeout(left());
        if (!entry.providerId) return; // it never started: nothing holds an end
        // Paused: the backend's end is set through a handle, and the sandbox paused again, so
        // a restart of serve finds the new end rather than the one it was created with.
        const handle = await this.#o.provider.resume(entry.providerId);
        await handle.setTimeout(left()); // after the resume, which takes a while
        await handle.pause();
      });
    }
    return entry.sandbox;
  }

  /** The sandbox ends at `end` (ms since the epoch): its TTL and expiresAt say so. */
  #setEnd(entry: Entry, end: number): void {
    const s = entry.sandbox;
    const created = Date.parse(s.metadata.creationTimestamp!);
    entry.sandbox = {
      ...s,
      spec: {
        ...s.spec,
        lifecycle: {
          ...s.spec.lifecycle,
          suspended: s.spec.lifecycle?.suspended ?? false,
          ttlSeconds: Math.ceil((end - created) / 1000),
        },
      },
      status: { ...s.status, expiresAt: new Date(end).toISOString() },
    };
  }

  listAllTenants(): Sandbox[] {
    return [...this.#entries.values()].map((e) => e.sandbox);
  }

  /** serve has no SandboxPools: every sandbox comes from the provider's one template. */
  getPool(): Promise<undefined> {
    return Promise.resolve(undefined);
  }

  reportActivity(name: string): Promise<void> {
    const entry = this.#entries.get(name);
    if (entry) entry.lastActivity = Date.now();
    return Promise.resolve();
  }

  token(s: Sandbox): Promise<string> {
    const token = this.#entries.get(s.metadata.name)?.token;
    if (!token) return Promise.reject(new Error(`sandbox ${s.metadata.name} is not running`));
    return Promise.resolve(token);
  }

  /**
   * Rebuilds the records from what the backend holds: running sandboxes are attached again (a
   * resume of a running sandbox only connects), paused ones stay paused until used.
   */
  async #load(): Promise<void> {
    const infos = await this.#o.provider.list({ labels: { [STATE_LABEL]: this.#o.serveId } });
    for (const info of infos) {
      const stored = recordOf(info.labels) as StoredRecord | undefined;
      if (!stored || this.#entries.has(stored.name)) continue;
      const running = info.state === "running" || info.state === "starting";
      const entry = this.#entry(
        stored,
        { phase: running ? "Starting" : "Suspended" },
        info.sandboxId,
      );
      // A lifetime changed after creation (setLifecycle) is the backend's, not the record's.
      if (info.expiresAt) this.#setEnd(entry, info.expiresAt.getTime());
      this.#entries.set(stored.name, entry);
      if (running)
        void this.#serial(entry, async () => {
          try {
            await this.#attach(entry, await this.#o.provider.resume(info.sandboxId));
          } catch (err) {
            this.#fail(entry, err);
          }
        });
    }
    this.#synced = true;
    this.#o.log.info({ sandboxes: this.#entries.size }, "sandboxes adopted from the backend");
  }

  /** Deletes sandboxes past their TTL and pauses those idle past their idle timeout. */
  async #reap(): Promise<void> {
    const now = Date.now();
    for (const [name, e] of this.#entries) {
      const expiresAt = e.sandbox.status?.expiresAt;
      try {
        if (expiresAt && Date.parse(expiresAt) <= now) {
          this.#o.log.info({ sandbox: name }, "deleting sandbox: its TTL ended");
          await this.delete(name);
          continue;
        }
        const idleS = e.sandbox.spec.lifecycle?.idleTimeoutSeconds;
        const idleMs = idleS ? idleS * 1000 : this.#o.idleTimeoutMs;
        if (idleMs > 0 && e.sandbox.status?.phase === "Ready" && now - e.lastActivity >= idleMs) {
          this.#o.log.info({ sandbox: name }, "pausing idle sandbox");
          await this.setSuspended(name, true);
        }
      } catch (err) {
        this.#o.log.warn({ err, sandbox: name }, "could not end or pause sandbox");
      }
    }
  }
}
