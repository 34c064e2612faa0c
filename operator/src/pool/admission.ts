/**
 * The maxActive cap of each pool, decided in one place. Reconciles of different sandboxes run
 * concurrently, and the caches they read lag the writes they make, so counting pods in a cache
 * would let two sandboxes take the last slot. Instead every decision goes through this in-memory
 * ledger, which a single leader owns: checking and taking a slot happen in one synchronous step.
 *
 * The ledger of a pool is built from the caches the first time the pool is seen (after the caches
 * synced), so a restarted operator continues from what is actually running. Evictions are
 * recorded here first and carried out by the victim's own reconcile (no key is ever worked on by
 * two workers); the victim's status then holds the eviction durably.
 */
export type Admission = { admitted: true; victims: string[] } | { admitted: false };

export interface PoolView {
  maxActive: number;
  policy: "LRU" | "Reject";
  /** Sandbox keys of the pool that run now (pods present, not suspended), for the first build. */
  running: () => string[];
  /** When a member was last active (ms since epoch); eviction takes the smallest. */
  lastActive: (key: string) => number;
}

export class PoolAdmission {
  readonly #running = new Map<string, Set<string>>();
  readonly #evicting = new Map<string, string>(); // sandbox key -> pool key
  readonly #waiting = new Map<string, Set<string>>();

  /** Takes (or confirms) a slot for `key`; under LRU, names who must make room. */
  admit(poolKey: string, key: string, view: PoolView): Admission {
    const running = this.#ledger(poolKey, view);
    if (running.has(key)) return { admitted: true, victims: [] };
    const over = running.size + 1 - view.maxActive;
    if (over <= 0) {
      running.add(key);
      this.#waiting.get(poolKey)?.delete(key);
      return { admitted: true, victims: [] };
    }
    if (view.policy === "Reject") {
      this.#waitingSet(poolKey).add(key);
      return { admitted: false };
    }
    const victims = this.#leastRecent(running, view, over);
    for (const v of victims) this.#evict(poolKey, v, running);
    running.add(key);
    this.#waiting.get(poolKey)?.delete(key);
    return { admitted: true, victims };
  }

  /** Evicts members until the pool is within maxActive again (after maxActive was lowered). */
  trim(poolKey: string, view: PoolView): string[] {
    const running = this.#ledger(poolKey, view);
    const over = running.size - view.maxActive;
    if (over <= 0) return [];
    const victims = this.#leastRecent(running, view, over);
    for (const v of victims) this.#evict(poolKey, v, running);
    return victims;
  }

  /** `key` stopped running (suspended, deleted, failed). Returns the keys waiting for a slot. */
  release(poolKey: string, key: string): string[] {
    const running = this.#running.get(poolKey);
    if (!running?.delete(key)) return [];
    return [...(this.#waiting.get(poolKey) ?? [])];
  }

  /** Whether `key` has been chosen for eviction and has not yet been suspended. */
  isEvicting(key: string): boolean {
    return this.#evicting.has(key);
  }

  evicted(key: string): void {
    this.#evicting.delete(key);
  }

  activeCount(poolKey: string): number | undefined {
    return this.#running.get(poolKey)?.size;
  }

  forgetPool(poolKey: string): void {
    this.#running.delete(poolKey);
    this.#waiting.delete(poolKey);
  }

  #ledger(poolKey: string, view: PoolView): Set<string> {
    let running = this.#running.get(poolKey);
    if (!running) {
      running = new Set(view.running());
      this.#running.set(poolKey, running);
    }
    return running;
  }

  #waitingSet(poolKey: string): Set<string> {
    let s = this.#waiting.get(poolKey);
    if (!s) this.#waiting.set(poolKey, (s = new Set()));
    return s;
  }

  #leastRecent(running: Set<string>, view: PoolView, n: number): string[] {
    return [...running]
      .filter((k) => !this.#evicting.has(k))
      .sort((a, b) => view.lastActive(a) - view.lastActive(b))
      .slice(0, n);
  }

  #evict(poolKey: string, key: string, running: Set<string>): void {
    running.delete(key);
    this.#evicting.set(key, poolKey);
  }
}
