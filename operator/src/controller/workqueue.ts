/**
 * A keyed work queue with client-go's semantics:
 * - a key waiting in the queue is there once, however often it is added (dedup);
 * - a key being processed is never handed to a second worker; added meanwhile, it is queued
 *   again once, when the first worker calls done();
 * - addAfter keeps the earliest ready time when a key is delayed twice;
 * - addRateLimited delays by the key's exponential backoff, which forget() resets.
 */
import {
  workqueueAdds,
  workqueueDepth,
  workqueueLongestRunning,
  workqueueQueueDuration,
  workqueueRetries,
  workqueueUnfinished,
  workqueueWorkDuration,
} from "../metrics.ts";
import { Delays } from "./delays.ts";

/** Per-key exponential backoff: base·2^failures, capped (controller-runtime: 5 ms → 1000 s). */
export class ExponentialBackoff {
  readonly #failures = new Map<string, number>();
  readonly baseMs: number;
  readonly maxMs: number;
  constructor(baseMs = 5, maxMs = 300_000) {
    this.baseMs = baseMs;
    this.maxMs = maxMs;
  }
  when(key: string): number {
    const n = this.#failures.get(key) ?? 0;
    this.#failures.set(key, n + 1);
    return Math.min(this.baseMs * 2 ** n, this.maxMs);
  }
  retries(key: string): number {
    return this.#failures.get(key) ?? 0;
  }
  forget(key: string): void {
    this.#failures.delete(key);
  }
}

export interface WorkQueueOptions {
  name: string;
  backoff?: ExponentialBackoff;
  /** Clock for tests. */
  now?: () => number;
}

export class WorkQueue {
  readonly name: string;
  readonly backoff: ExponentialBackoff;
  readonly #now: () => number;
  /** Keys ready to be handed out, in order; a Set keeps insertion order and dedups. */
  readonly #queue = new Set<string>();
  /** Keys that need processing (queued, or re-added while processing), with their add time. */
  readonly #dirty = new Map<string, number>();
  /** Keys a worker holds, with the time it took them. */
  readonly #processing = new Map<string, number>();
  /** Keys added with a delay, behind one timer for all of them. */
  readonly #delayed: Delays;
  #waiters: Array<(key: string | undefined) => void> = [];
  #shuttingDown = false;
  #drained: (() => void) | undefined;
  readonly #labels: { name: string; controller: string };
  readonly #gauges: NodeJS.Timeout;

  constructor(opts: WorkQueueOptions) {
    this.name = opts.name;
    this.backoff = opts.backoff ?? new ExponentialBackoff();
    this.#now = opts.now ?? (() => performance.now());
    this.#delayed = new Delays((key) => this.add(key), this.#now);
    this.#labels = { name: opts.name, controller: opts.name };
    // The in-progress gauges are sampled, like client-go's updateUnfinishedWorkLoop.
    this.#gauges = setInterval(() => this.#sampleInProgress(), 500);
    this.#gauges.unref();
  }

  get length(): number {
    return this.#queue.size;
  }

  get shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  add(key: string): void {
    if (this.#shuttingDown || this.#dirty.has(key)) return;
    this.#dirty.set(key, this.#now());
    workqueueAdds.inc(this.#labels);
    if (this.#processing.has(key)) return; // queued again by done()
    this.#push(key);
  }

  addAfter(key: string, delayMs: number): void {
    if (this.#shuttingDown) return;
    if (delayMs <= 0) return this.add(key);
    this.#delayed.add(key, this.#now() + delayMs); // the earlier ready time wins
  }

  addRateLimited(key: string): void {
    workqueueRetries.inc(this.#labels);
    this.addAfter(key, this.backoff.when(key));
  }

  forget(key: string): void {
    this.backoff.forget(key);
  }

  /** The next key, or undefined once the queue shuts down. The caller must call done(key). */
  get(): Promise<string | undefined> {
    // Shut down means no more keys, even queued ones: a stopping (or deposed) leader must not
    // start new reconciles while it waits for the ones in flight.
    if (this.#shuttingDown) return Promise.resolve(undefined);
    const key = this.#take();
    if (key !== undefined) return Promise.resolve(key);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  done(key: string): void {
    const took = this.#processing.get(key);
    if (took === undefined) return;
    this.#processing.delete(key);
    workqueueWorkDuration.observe(this.#labels, (this.#now() - took) / 1000);
    if (this.#dirty.has(key) && !this.#shuttingDown) this.#push(key);
    if (this.#shuttingDown && this.#processing.size === 0) this.#drained?.();
  }

  /** Stops handing out keys; resolves when every key in progress is done. */
  shutdown(): Promise<void> {
    this.#shuttingDown = true;
    clearInterval(this.#gauges);
    this.#delayed.clear();
    for (const w of this.#waiters.splice(0)) w(undefined);
    if (this.#processing.size === 0) return Promise.resolve();
    return new Promise((resolve) => (this.#drained = resolve));
  }

  #push(key: string): void {
    const waiter = this.#waiters.shift();
    if (waiter) {
      this.#queue.add(key);
      waiter(this.#take());
      return;
    }
    this.#queue.add(key);
    workqueueDepth.set(this.#labels, this.#queue.size);
  }

  #take(): string | undefined {
    const next = this.#queue.values().next();
    if (next.done) return undefined;
    const key = next.value;
    this.#queue.delete(key);
    const added = this.#dirty.get(key) ?? this.#now();
    this.#dirty.delete(key);
    const now = this.#now();
    this.#processing.set(key, now);
    workqueueDepth.set(this.#labels, this.#queue.size);
    workqueueQueueDuration.observe(this.#labels, (now - added) / 1000);
    return key;
  }

  #sampleInProgress(): void {
    const now = this.#now();
    let total = 0;
    let longest = 0;
    for (const started of this.#processing.values()) {
      total += now - started;
      longest = Math.max(longest, now - started);
    }
    workqueueUnfinished.set(this.#labels, total / 1000);
    workqueueLongestRunning.set(this.#labels, longest / 1000);
  }
}
