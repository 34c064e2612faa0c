/**
 * Leader election on a coordination.k8s.io Lease with client-go's semantics: a record is valid
 * for leaseDuration from when *this* process last saw it change (never from the holder's clock),
 * writes carry the resourceVersion so two candidates cannot both win, the leader renews every
 * retryPeriod and gives up when it has not renewed within renewDeadline, and a clean shutdown
 * releases the lease so a standby takes over at once instead of waiting for it to expire.
 */
import type { Logger } from "pino";
import { type KObject, type Kube, type Resource, isConflict, isNotFound } from "./rest.ts";

const LEASES: Resource = {
  group: "coordination.k8s.io",
  version: "v1",
  plural: "leases",
  kind: "Lease",
};

interface Lease extends KObject {
  spec?: {
    holderIdentity?: string | null;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  logger: Logger;
  /** Sees every change of leadership, and the initial "not leading" (for the caller's metrics). */
  onLeading?: (leading: boolean) => void;
}

/** MicroTime as the API wants it: RFC 3339 with microseconds. */
const microTime = (d = new Date()) => d.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");

export class LeaderElector {
  readonly identity: string;
  readonly #kube: Kube;
  readonly #o: Required<Omit<LeaderElectionOptions, "logger" | "onLeading">>;
  readonly #onLeading: (leading: boolean) => void;
  readonly #log: Logger;
  #observed: { record: string; at: number } | undefined;
  #leader = false;
  #lastRenew = 0;
  #stopped = false;
  #wake: (() => void) | undefined;

  constructor(kube: Kube, opts: LeaderElectionOptions) {
    this.#kube = kube;
    this.identity = opts.identity;
    this.#o = {
      namespace: opts.namespace,
      name: opts.name,
      identity: opts.identity,
      leaseDurationMs: opts.leaseDurationMs ?? 15_000,
      renewDeadlineMs: opts.renewDeadlineMs ?? 10_000,
      retryPeriodMs: opts.retryPeriodMs ?? 2_000,
    };
    this.#log = opts.logger.child({
      lease: `${opts.namespace}/${opts.name}`,
      identity: opts.identity,
    });
    this.#onLeading = opts.onLeading ?? (() => {});
    this.#onLeading(false);
  }

  get isLeader(): boolean {
    return this.#leader;
  }

  /** For /healthz: a leader that has not renewed for well past its deadline is wedged. */
  healthy(): boolean {
    return (
      !this.#leader ||
      performance.now() - this.#lastRenew < this.#o.leaseDurationMs + this.#o.renewDeadlineMs
    );
  }

  /** Resolves true once this process holds the lease, false if release() comes first. */
  async acquire(): Promise<boolean> {
    let logged = false;
    while (!this.#stopped) {
      if (await this.#tryAcquireOrRenew()) {
        this.#becomeLeader();
        if (!this.#stopped) return true;
        // release() came while the winning write was in flight: hand the lease straight back
        // rather than leave a standby waiting for it to expire.
        await this.release();
        return false;
      }
      if (!logged) {
        this.#log.info("waiting to become leader");
        logged = true;
      }
      await this.#sleep(this.#o.retryPeriodMs);
    }
    return false;
  }

  /** Renews until the lease is lost (resolves) or stop() is called (resolves too). */
  async holdUntilLost(): Promise<"lost" | "stopped"> {
    while (!this.#stopped) {
      await this.#sleep(this.#o.retryPeriodMs);
      if (this.#stopped) break;
      if (await this.#tryAcquireOrRenew()) {
        this.#lastRenew = performance.now();
        continue;
      }
      if (performance.now() - this.#lastRenew > this.#o.renewDeadlineMs) {
        this.#leader = false;
        this.#onLeading(false);
        this.#log.error("leadership lost: the lease was not renewed within the renew deadline");
        return "lost";
      }
    }
    return "stopped";
  }

  /** Stops campaigning; a leader hands the lease back so a standby can take over at once. */
  async release(): Promise<void> {
    this.#stopped = true;
    this.#wake?.();
    if (!this.#leader) return;
    this.#leader = false;
    this.#onLeading(false);
    try {
      const lease = await this.#kube.get<Lease>(LEASES, this.#o.namespace, this.#o.name);
      if (lease.spec?.holderIdentity !== this.identity) return;
      await this.#kube.request(
        "PUT",
        `/apis/coordination.k8s.io/v1/namespaces/${this.#o.namespace}/leases/${this.#o.name}`,
        {
          body: {
            ...lease,
            spec: {
              ...lease.spec,
              holderIdentity: null,
              leaseDurationSeconds: 1,
              renewTime: microTime(),
            },
          },
        },
      );
      this.#log.info("released the lease");
    } catch (err) {
      this.#log.warn({ err }, "could not release the lease; it will expire");
    }
  }

  async #tryAcquireOrRenew(): Promise<boolean> {
    const now = microTime();
    const durationS = Math.ceil(this.#o.leaseDurationMs / 1000);
    let lease: Lease;
    try {
      lease = await this.#kube.get<Lease>(LEASES, this.#o.namespace, this.#o.name);
    } catch (err) {
      if (!isNotFound(err)) {
        this.#log.warn({ err: (err as Error).message }, "could not read the lease");
        return false;
      }
      try {
        await this.#kube.create<Lease>(LEASES, {
          metadata: { name: this.#o.name, namespace: this.#o.namespace },
          spec: {
            holderIdentity: this.identity,
            leaseDurationSeconds: durationS,
            acquireTime: now,
            renewTime: now,
            leaseTransitions: 0,
          },
        });
        return true;
      } catch (e) {
        if (!isConflict(e))
          this.#log.warn({ err: (e as Error).message }, "could not create the lease");
        return false;
      }
    }
    const spec = lease.spec ?? {};
    const record = JSON.stringify([spec.holderIdentity, spec.renewTime, spec.leaseDurationSeconds]);
    if (this.#observed?.record !== record) this.#observed = { record, at: performance.now() };
    const holder = spec.holderIdentity ?? "";
    const validMs = (spec.leaseDurationSeconds ?? durationS) * 1000;
    if (holder && holder !== this.identity && performance.now() < this.#observed.at + validMs) {
      return false; // someone else holds a lease that has not expired by our clock
    }
    const takingOver = holder !== this.identity;
    try {
      await this.#kube.request(
        "PUT",
        `/apis/coordination.k8s.io/v1/namespaces/${this.#o.namespace}/leases/${this.#o.name}`,
        {
          body: {
            ...lease,
            spec: {
              holderIdentity: this.identity,
              leaseDurationSeconds: durationS,
              acquireTime: takingOver ? now : (spec.acquireTime ?? now),
              renewTime: now,
              leaseTransitions: (spec.leaseTransitions ?? 0) + (takingOver && holder ? 1 : 0),
            },
          },
        },
      );
      return true;
    } catch (err) {
      if (!isConflict(err))
        this.#log.warn({ err: (err as Error).message }, "could not update the lease");
      return false; // lost the race: someone else wrote first
    }
  }

  #becomeLeader(): void {
    this.#leader = true;
    this.#lastRenew = performance.now();
    this.#onLeading(true);
    this.#log.info("became leader");
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.#wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }
}
