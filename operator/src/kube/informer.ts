/**
 * A cache of one kind of object kept current by list+watch (client-node's ListWatch), made to
 * survive what a long-running operator meets:
 * - ListWatch stops for good on any error but 410 and timeouts (an API server restart, a
 *   refused connection, a failed list); this restarts it from the last resourceVersion with
 *   jittered exponential backoff, 0.5 s → 30 s, reset by the next event;
 * - a watchdog restarts it when no event, bookmark or reconnect has been seen for too long;
 * - `synced` resolves once the first list is in the cache, so controllers never act on a
 *   partial view.
 * Handlers get the cached object: never mutate it.
 */
import {
  type KubernetesListObject,
  type KubernetesObject,
  ListWatch,
  Watch,
} from "@kubernetes/client-node";
import type { Logger } from "pino";
import { type KList, type KObject, type Kube, type Resource, resourcePath } from "./rest.ts";
import type { Transform } from "./transforms.ts";

export type Handler<T> = (obj: T) => void;

export interface InformerOptions<T extends KObject = KObject> {
  resource: Resource;
  /** Watch one namespace; all namespaces when omitted. */
  namespace?: string;
  labelSelector?: string;
  logger: Logger;
  /** Restart when nothing has been heard for this long (ms). */
  staleAfterMs?: number;
  /** Sees every restart and its cause (for the caller's metrics). */
  onRestart?: (cause: "error" | "stale") => void;
  /**
   * What the cache keeps of each object (kube/transforms.ts); applied to listed and watched
   * objects before the cache stores them, so handlers and get/list see only its result.
   */
  transform?: Transform<T>;
  /** Objects per list request; 0 lists all in one (default LIST_PAGE_SIZE). */
  listPageSize?: number;
}

const MIN_BACKOFF_MS = 500;
/** Objects per list request (client-go's pager: 500). */
export const LIST_PAGE_SIZE = 500;
const MAX_BACKOFF_MS = 30_000;

export class Informer<T extends KObject> {
  readonly resource: Resource;
  readonly synced: Promise<void>;
  // ListWatch's types say timestamps are Dates; on the wire (and so here) they are strings.
  readonly #lw: ListWatch<KubernetesObject>;
  readonly #log: Logger;
  readonly #staleAfterMs: number;
  readonly #onRestart: InformerOptions<T>["onRestart"];
  #markSynced!: () => void;
  #isSynced = false;
  #stopped = true;
  #failures = 0;
  #lastHeard = performance.now();
  #lastRv = "";
  #restartTimer: NodeJS.Timeout | undefined;
  #quietUntil = 0;
  #watchdog: NodeJS.Timeout | undefined;

  constructor(kube: Kube, opts: InformerOptions<T>) {
    this.resource = opts.resource;
    this.#log = opts.logger.child({ informer: opts.resource.plural });
    this.#staleAfterMs = opts.staleAfterMs ?? 5 * 60_000;
    this.#onRestart = opts.onRestart;
    this.synced = new Promise((resolve) => (this.#markSynced = resolve));
    const path = resourcePath(opts.resource, opts.namespace);
    // managedFields alone are a large share of every object and never read: without a
    // transform of its own, a cache still drops them.
    const transform = (opts.transform ?? withoutManagedFields) as Transform<KObject>;
    // Listed a page at a time (client-go's pager does the same), each page transformed before
    // the next is read: 10,000 pods in one answer are ~100 MB of JSON text and its parse, all
    // alive at once, where a page is a few MB. The pages are one consistent snapshot (the first
    // page's resourceVersion); a continue token that expired fails the list, and the informer
    // restarts it from the start like any other failed list.
    const pageSize = opts.listPageSize ?? LIST_PAGE_SIZE;
    const list = async () => {
      const items: KObject[] = [];
      let last: KList<T> | undefined;
      let cont: string | undefined;
      do {
        const page: KList<T> = await kube.list<T>(opts.resource, opts.namespace, {
          ...(opts.labelSelector ? { labelSelector: opts.labelSelector } : {}),
          ...(pageSize ? { limit: pageSize } : {}),
          ...(cont ? { continue: cont } : {}),
        });
        const kind = page.kind?.replace(/List$/, "");
        for (const item of page.items) {
          items.push(
            transform({
              ...item,
              apiVersion: item.apiVersion ?? page.apiVersion,
              kind: item.kind ?? kind,
            }),
          );
        }
        cont = page.metadata?.continue || undefined;
        last = page;
      } while (cont);
      // ListWatch fills its cache right after this promise resolves, in the same tick.
      setImmediate(() => {
        this.#isSynced = true;
        this.#markSynced();
      });
      return {
        ...last,
        metadata: { resourceVersion: last.metadata?.resourceVersion },
        items,
      } as unknown as KubernetesListObject<KubernetesObject>;
    };
    // Bookmarks move the resourceVersion along on quiet watches, so a reconnect never relists.
    this.#lw = new ListWatch<KubernetesObject>(
      `${path}?allowWatchBookmarks=true`,
      transformingWatch(new Watch(kube.config), transform),
      list,
      false,
      opts.labelSelector,
    );
    const heard = () => {
      this.#lastHeard = performance.now();
      this.#failures = 0;
    };
    this.#lw.on("add", heard);
    this.#lw.on("update", heard);
    this.#lw.on("delete", heard);
    this.#lw.on("connect", () => (this.#lastHeard = performance.now()));
    this.#lw.on("error", (err) => this.#onError(err));
  }

  get isSynced(): boolean {
    return this.#isSynced;
  }

  on(event: "add" | "update" | "delete", handler: Handler<T>): void {
    this.#lw.on(event, handler as unknown as (obj: KubernetesObject) => void);
  }

  get(name: string, namespace?: string): T | undefined {
    return this.#lw.get(name, namespace) as T | undefined;
  }

  list(namespace?: string): T[] {
    return this.#lw.list(namespace) as unknown as T[];
  }

  start(): void {
    if (!this.#stopped) return; // never two watches for one informer
    this.#stopped = false;
    void this.#lw.start();
    this.#watchdog = setInterval(
      () => this.#checkStale(),
      Math.min(30_000, this.#staleAfterMs / 4),
    );
    this.#watchdog.unref();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#restartTimer);
    clearInterval(this.#watchdog);
    void this.#lw.stop();
  }

  #onError(err: unknown): void {
    if (this.#stopped || this.#quietUntil > performance.now()) return;
    const delay = Math.min(MIN_BACKOFF_MS * 2 ** this.#failures, MAX_BACKOFF_MS);
    const jittered = Math.round(delay * (0.8 + Math.random() * 0.4));
    this.#failures++;
    this.#onRestart?.("error");
    this.#log.warn(
      { err: (err as Error)?.message ?? String(err), retryInMs: jittered },
      "watch or list failed; restarting",
    );
    // ListWatch has already stopped itself; starting it again resumes from the last
    // resourceVersion (or relists after a 410) and keeps the cache.
    this.#schedule(jittered, () => void this.#lw.start().catch((e: unknown) => this.#onError(e)));
  }

  #checkStale(): void {
    const rv = this.#lw.latestResourceVersion();
    if (rv !== this.#lastRv) {
      this.#lastRv = rv; // a bookmark or event moved it: the watch is alive
      this.#lastHeard = performance.now();
      return;
    }
    if (performance.now() - this.#lastHeard < this.#staleAfterMs || this.#restartTimer) return;
    this.#onRestart?.("stale");
    this.#log.warn(
      { silentForMs: Math.round(performance.now() - this.#lastHeard) },
      "watch went quiet; restarting it",
    );
    this.#lastHeard = performance.now();
    this.#restart();
  }

  /** Tears down a live but silent watch, then starts again once the old request has ended. */
  #restart(): void {
    this.#quietUntil = performance.now() + 1_000; // the aborted request reports an error: not ours
    void this.#lw.stop();
    this.#schedule(1_000, () => void this.#lw.start().catch((e: unknown) => this.#onError(e)));
  }

  #schedule(afterMs: number, fn: () => void): void {
    clearTimeout(this.#restartTimer);
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      if (!this.#stopped) fn();
    }, afterMs);
    this.#restartTimer.unref();
  }
}

const withoutManagedFields: Transform = (o) => {
  if (!("managedFields" in o.metadata)) return o;
  const { managedFields: _dropped, ...metadata } = o.metadata as KObject["metadata"] & {
    managedFields?: unknown;
  };
  return { ...o, metadata };
};

/**
 * A Watch whose added, modified and deleted objects pass through `transform` before ListWatch
 * sees them: the cache stores the transformed object, the parsed one is garbage at once. Errors
 * and bookmarks (a Status, a bare resourceVersion) pass untouched.
 */
function transformingWatch(watch: Watch, transform: Transform<KObject>): Watch {
  const inner = watch.watch.bind(watch);
  watch.watch = (path, params, callback, done) =>
    inner(
      path,
      params,
      (phase, obj: KObject) =>
        callback(
          phase,
          phase === "ADDED" || phase === "MODIFIED" || phase === "DELETED" ? transform(obj) : obj,
        ),
      done,
    );
  return watch;
}
