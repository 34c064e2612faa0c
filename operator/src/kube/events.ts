/**
 * Events (events.k8s.io/v1) on the objects the operator manages, one per transition, so
 * `kubectl describe sandbox` tells the story. Recording never fails a reconcile: an Event that
 * cannot be written is logged and dropped. The same event on the same object is written once per
 * window, as client-go's correlator does, so a flapping state cannot flood the API server.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import type { KObject, Kube, Resource } from "./rest.ts";

const EVENTS: Resource = { group: "events.k8s.io", version: "v1", plural: "events", kind: "Event" };
const DEDUP_WINDOW_MS = 5 * 60_000;

export type EventType = "Normal" | "Warning";

export class EventRecorder {
  readonly #kube: Kube;
  readonly #instance: string;
  readonly #log: Logger;
  readonly #recent = new Map<string, number>();
  #prunedAt = 0;

  constructor(kube: Kube, instance: string, logger: Logger) {
    this.#kube = kube;
    this.#instance = instance;
    this.#log = logger;
  }

  /** `reason` is CamelCase (Ready, Suspended, ...); `action` says what the operator did. */
  record(obj: KObject, type: EventType, reason: string, action: string, note: string): void {
    const key = `${obj.metadata.uid}/${reason}/${note}`;
    const now = Date.now();
    if ((this.#recent.get(key) ?? 0) > now - DEDUP_WINDOW_MS) return;
    this.#recent.set(key, now);
    // Keys older than the window are dropped once a minute, not on every record: with more
    // than 10,000 objects recording within one window, pruning each time would scan them all.
    if (this.#recent.size > 10_000 && now - this.#prunedAt > 60_000) this.#prune(now);
    const ns = obj.metadata.namespace ?? "default";
    void this.#kube
      .create(EVENTS, {
        metadata: { name: `${obj.metadata.name}.${randomBytes(8).toString("hex")}`, namespace: ns },
        eventTime: new Date(now).toISOString().replace(/Z$/, "000Z"),
        reportingController: "sandpit.dev/operator",
        reportingInstance: this.#instance,
        action,
        reason,
        note: note.slice(0, 1024),
        type,
        regarding: {
          apiVersion: obj.apiVersion,
          kind: obj.kind,
          name: obj.metadata.name,
          namespace: ns,
          uid: obj.metadata.uid,
          resourceVersion: obj.metadata.resourceVersion,
        },
      })
      .catch((err: unknown) => this.#log.debug({ err, reason }, "could not record an event"));
  }

  #prune(now: number): void {
    this.#prunedAt = now;
    for (const [k, at] of this.#recent) if (at <= now - DEDUP_WINDOW_MS) this.#recent.delete(k);
  }
}
