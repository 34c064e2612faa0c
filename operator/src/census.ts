/**
 * What the informer caches hold, counted when Prometheus scrapes: Sandboxes by phase, how long the
 * oldest Pending one has waited, and each pool's use of its maxActive and warm capacity
 * (kube-state-metrics' way: the gauges are computed from the cache, not kept up to date by the
 * reconcilers). Every replica has the caches, so a standby reports the same as the leader.
 *
 * A Sandbox's status does not say since when it has been Pending (the Ready condition moves only
 * when its status changes, so it still carries the time a resumed sandbox was suspended), so the
 * census remembers when it first saw each one Pending: the later of its creation and the previous
 * count (or the operator's start). An operator that restarts therefore counts from its start.
 */
import type { Sandbox, SandboxPool, SandboxStatus } from "./api/v1alpha1.ts";

export type Phase = NonNullable<SandboxStatus["phase"]>;
export const PHASES: readonly Phase[] = [
  "Pending",
  "Starting",
  "Ready",
  "Suspended",
  "Failed",
  "Terminating",
];

export interface PoolCount {
  namespace: string;
  pool: string;
  maxActive: number;
  active: number;
  warm: number;
  warmReady: number;
}

export interface CensusSample {
  /** Sandboxes by namespace and phase; every phase of a namespace that has Sandboxes, zeros too. */
  phases: Map<string, Record<Phase, number>>;
  /** Seconds the oldest Pending Sandbox of each namespace has waited (0 when none is Pending). */
  pendingOldestSeconds: Map<string, number>;
  pools: PoolCount[];
}

export interface CensusSource {
  sandboxes(): readonly Sandbox[];
  pools(): readonly SandboxPool[];
}

/** Samples within this long of the last one reuse it: one scrape reads several gauges. */
const REUSE_MS = 1_000;

export class Census {
  readonly #source: CensusSource;
  readonly #now: () => number;
  /** UID → when that Sandbox was first seen Pending (ms). */
  readonly #pendingSince = new Map<string, number>();
  #lastLook: number;
  #last: { at: number; sample: CensusSample } | undefined;

  constructor(source: CensusSource, now: () => number = Date.now) {
    this.#source = source;
    this.#now = now;
    this.#lastLook = now();
  }

  sample(): CensusSample {
    const t = this.#now();
    if (this.#last && t - this.#last.at < REUSE_MS && t >= this.#last.at) return this.#last.sample;
    const phases = new Map<string, Record<Phase, number>>();
    const pendingOldestSeconds = new Map<string, number>();
    const stillPending = new Set<string>();
    for (const s of this.#source.sandboxes()) {
      const ns = s.metadata.namespace ?? "";
      let counts = phases.get(ns);
      if (!counts) {
        counts = Object.fromEntries(PHASES.map((p) => [p, 0])) as Record<Phase, number>;
        phases.set(ns, counts);
        pendingOldestSeconds.set(ns, 0);
      }
      // Not yet given a status (the operator has not reconciled it): it waits like a Pending one.
      const phase: Phase = s.status?.phase ?? "Pending";
      counts[phase]++;
      if (phase !== "Pending") continue;
      const uid = s.metadata.uid ?? `${ns}/${s.metadata.name}`;
      stillPending.add(uid);
      let since = this.#pendingSince.get(uid);
      if (since === undefined) {
        const created = Date.parse(s.metadata.creationTimestamp ?? "");
        since = Math.max(Number.isNaN(created) ? t : created, this.#lastLook);
        this.#pendingSince.set(uid, since);
      }
      const waited = Math.max(0, (t - since) / 1000);
      if (waited > pendingOldestSeconds.get(ns)!) pendingOldestSeconds.set(ns, waited);
    }
    for (const uid of this.#pendingSince.keys())
      if (!stillPending.has(uid)) this.#pendingSince.delete(uid);
    this.#lastLook = t;
    const pools = this.#source.pools().map((p) => ({
      namespace: p.metadata.namespace ?? "",
      pool: p.metadata.name,
      maxActive: p.spec.maxActive,
      active: p.status?.active ?? 0,
      warm: p.spec.warm ?? 0,
      warmReady: p.status?.warmReady ?? 0,
    }));
    const sample = { phases, pendingOldestSeconds, pools };
    this.#last = { at: t, sample };
    return sample;
  }
}
