/**
 * Runs a level-triggered reconciler over a WorkQueue with N workers, the way controller-runtime's
 * reconcileHandler does: an error requeues the key with backoff, a TerminalError does not, a
 * requested delay requeues after it, success forgets the key's backoff. The reconciler gets only
 * the key and reads current state from the informer caches.
 */
import type { Logger } from "pino";
import {
  activeWorkers,
  maxConcurrentReconciles,
  reconcileErrors,
  reconcilePanics,
  reconcileTime,
  reconcileTotal,
  terminalReconcileErrors,
} from "../metrics.ts";
import { deadline } from "../kube/deadline.ts";
import { type ExponentialBackoff, WorkQueue } from "./workqueue.ts";

export interface ReconcileResult {
  /** Reconcile this key again after this long (a timer, a TTL, a retry that is not an error). */
  requeueAfterMs?: number;
}
export type Reconciler = (key: string, signal: AbortSignal) => Promise<ReconcileResult | void>;

/** An error retrying cannot fix; it is reported and the key is not requeued. */
export class TerminalError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "TerminalError";
  }
}

export interface ControllerOptions {
  name: string;
  reconcile: Reconciler;
  logger: Logger;
  workers?: number;
  /**
   * A reconcile's signal aborts after this long. Reconcilers pass it to every wait that can be
   * long (sandboxd's health checks and /v1/init), so a stuck reconcile gives its worker back.
   */
  timeoutMs?: number;
  backoff?: ExponentialBackoff;
}

export class Controller {
  readonly name: string;
  readonly queue: WorkQueue;
  readonly #reconcile: Reconciler;
  readonly #log: Logger;
  readonly #workers: number;
  readonly #timeoutMs: number;
  #running: Promise<void>[] = [];

  constructor(opts: ControllerOptions) {
    this.name = opts.name;
    this.#reconcile = opts.reconcile;
    this.#log = opts.logger.child({ controller: opts.name });
    this.#workers = opts.workers ?? 4;
    this.#timeoutMs = opts.timeoutMs ?? 60_000;
    this.queue = new WorkQueue({
      name: opts.name,
      ...(opts.backoff ? { backoff: opts.backoff } : {}),
    });
    maxConcurrentReconciles.set({ controller: this.name }, this.#workers);
    activeWorkers.set({ controller: this.name }, 0);
  }

  enqueue(key: string, afterMs = 0): void {
    this.queue.addAfter(key, afterMs);
  }

  start(): void {
    if (this.#running.length) return;
    for (let i = 0; i < this.#workers; i++) this.#running.push(this.#worker());
  }

  /** Stops taking keys and waits for the reconciles in flight to finish. */
  async stop(): Promise<void> {
    await this.queue.shutdown();
    await Promise.all(this.#running);
    this.#running = [];
  }

  async #worker(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      activeWorkers.inc({ controller: this.name });
      const end = reconcileTime.startTimer({ controller: this.name });
      try {
        await this.#handle(key);
      } finally {
        end();
        activeWorkers.dec({ controller: this.name });
        this.queue.done(key);
      }
    }
  }

  async #handle(key: string): Promise<void> {
    const labels = { controller: this.name };
    const bound = deadline(this.#timeoutMs);
    try {
      const result = await this.#reconcile(key, bound.signal);
      this.queue.forget(key);
      if (result?.requeueAfterMs !== undefined && result.requeueAfterMs >= 0) {
        reconcileTotal.inc({ ...labels, result: "requeue_after" });
        this.queue.addAfter(key, Math.max(1, result.requeueAfterMs));
      } else {
        reconcileTotal.inc({ ...labels, result: "success" });
      }
    } catch (err) {
      if (err instanceof TerminalError) {
        this.queue.forget(key);
        terminalReconcileErrors.inc(labels);
        reconcileTotal.inc({ ...labels, result: "error" });
        this.#log.error({ key, err }, "reconcile failed for good");
        return;
      }
      if (!(err instanceof Error)) reconcilePanics.inc(labels);
      reconcileErrors.inc(labels);
      reconcileTotal.inc({ ...labels, result: "error" });
      const retries = this.queue.backoff.retries(key);
      // The first failures are routine (a conflict, a cache a step behind); say so quietly.
      const level = retries >= 3 ? "warn" : "debug";
      this.#log[level]({ key, err, retries }, "reconcile failed; retrying with backoff");
      this.queue.addRateLimited(key);
    } finally {
      bound.clear();
    }
  }
}
