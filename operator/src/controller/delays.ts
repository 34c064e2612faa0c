/**
 * Keys due at a time, all behind one timer: the workqueue's requeue-after (expiry, idle timeout,
 * "check again in 250 ms") for every sandbox, instead of one setTimeout each. A binary min-heap
 * by due time, with a map that says each key's one current due time; entries it no longer
 * matches (the key was moved earlier) are skipped when they surface, and compacted away when
 * they outnumber the live ones, so the heap stays bounded by the keys waiting.
 */
export class Delays {
  readonly #due = new Map<string, number>();
  #heap: { key: string; at: number }[] = [];
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Infinity;
  readonly #now: () => number;
  readonly #fire: (key: string) => void;

  constructor(fire: (key: string) => void, now: () => number = () => performance.now()) {
    this.#fire = fire;
    this.#now = now;
  }

  get size(): number {
    return this.#due.size;
  }

  /** When `key` is due, or undefined when it is not waiting. */
  dueAt(key: string): number | undefined {
    return this.#due.get(key);
  }

  /** Makes `key` due at `at`, unless it is due earlier already. */
  add(key: string, at: number): void {
    const current = this.#due.get(key);
    if (current !== undefined && current <= at) return;
    this.#due.set(key, at);
    this.#push({ key, at });
    if (this.#heap.length > 2 * this.#due.size + 64) this.#compact();
    this.#arm();
  }

  clear(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Infinity;
    this.#due.clear();
    this.#heap = [];
  }

  #arm(): void {
    const next = this.#heap[0];
    if (!next || next.at >= this.#timerAt) return;
    clearTimeout(this.#timer);
    this.#timerAt = next.at;
    this.#timer = setTimeout(() => this.#run(), Math.max(0, next.at - this.#now()));
    this.#timer.unref();
  }

  #run(): void {
    this.#timer = undefined;
    this.#timerAt = Infinity;
    const now = this.#now();
    while (this.#heap.length && this.#heap[0]!.at <= now) {
      const { key, at } = this.#pop()!;
      if (this.#due.get(key) !== at) continue; // moved earlier: fired already or still to come
      this.#due.delete(key);
      this.#fire(key);
    }
    this.#arm();
  }

  #compact(): void {
    this.#heap = [];
    for (const [key, at] of this.#due) this.#push({ key, at });
  }

  #push(e: { key: string; at: number }): void {
    const h = this.#heap;
    h.push(e);
    for (let i = h.length - 1; i > 0;) {
      const parent = (i - 1) >> 1;
      if (h[parent]!.at <= h[i]!.at) break;
      [h[parent], h[i]] = [h[i]!, h[parent]!];
      i = parent;
    }
  }

  #pop(): { key: string; at: number } | undefined {
    const h = this.#heap;
    const top = h[0];
    const last = h.pop();
    if (h.length && last) {
      h[0] = last;
      for (let i = 0; ;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l]!.at < h[m]!.at) m = l;
        if (r < h.length && h[r]!.at < h[m]!.at) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i]!, h[m]!];
        i = m;
      }
    }
    return top;
  }
}
