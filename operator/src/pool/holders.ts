/**
 * Which provisioner replicas holding warm-pod reservations are alive: each renews a Lease
 * labelled as a reservation holder (operator/src/api/reservations.ts). Read with one LIST per
 * namespace, reused for a second: adoption and the pool reconciler ask often, the answer
 * changes on the scale of a Lease's duration.
 */
import { LEASES, type Lease, RESERVATION, leaseAlive } from "../api/reservations.ts";
import type { Kube } from "../kube/rest.ts";

const FRESH_MS = 1_000;

export class Holders {
  readonly #kube: Kube;
  readonly #byNamespace = new Map<string, { at: number; live: Promise<Set<string>> }>();

  constructor(kube: Kube) {
    this.#kube = kube;
  }

  /**
   * Whether the holder of that Lease is alive. One missing from the last list is asked about
   * again with a new one: a replica that started since would otherwise look dead, and its
   * reservations free for the taking.
   */
  async alive(namespace: string, holder: string): Promise<boolean> {
    return (
      (await this.#live(namespace)).has(holder) || (await this.#live(namespace, true)).has(holder)
    );
  }

  /** Names of the live holders' Leases in `namespace`. */
  #live(namespace: string, fresh = false): Promise<Set<string>> {
    const now = performance.now();
    const cached = this.#byNamespace.get(namespace);
    if (cached && !fresh && now - cached.at < FRESH_MS) return cached.live;
    const live = this.#kube
      .list<Lease>(LEASES, namespace, { labelSelector: RESERVATION.leaseLabel })
      .then(
        (l) =>
          new Set(l.items.filter((x) => leaseAlive(x, Date.now())).map((x) => x.metadata.name)),
      );
    // A failed read is not remembered: the next caller asks again.
    live.catch(() => this.#byNamespace.delete(namespace));
    this.#byNamespace.set(namespace, { at: now, live });
    return live;
  }
}
