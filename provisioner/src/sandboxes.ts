/**
 * Sandboxes as the provisioner sees them: Sandbox resources in one namespace, read from an
 * informer cache and written through the API. Nothing else is kept: a restarted or second
 * replica knows everything the first did, because it is all in the resources.
 *
 * Identity: a sandbox for a (tenant, user, thread) has a name derived from them, so concurrent
 * creates for one thread race to create one object and all get the same sandbox.
 */
import { createHash, randomBytes } from "node:crypto";
import type { Logger } from "pino";
import {
  ANNOTATION,
  LABEL,
  MANAGED_BY,
  POOLS,
  type PlatformBounds,
  RESERVATION,
  SANDBOXES,
  type Sandbox,
  type SandboxPool,
  type SandboxSpec,
  faultFail,
} from "@sandpit/operator/api";
import {
  Informer,
  type KObject,
  type Kube,
  KubeApiError,
  SECRETS,
  isAlreadyExists,
  isNotFound,
} from "@sandpit/operator/kube/client";
import { type FastReady, fastEligible, initReserved, reservedAnnotations } from "./fast-create.ts";
import { admitResources, existingPool } from "./limits.ts";
import type { Reserved, Reservations } from "./reservations.ts";
import type { CreateInput, SandboxBackend } from "./store.ts";

export type { CreateInput };

// The provisioner's routes see the Sandbox API through this module.
export { LABEL, type Sandbox };
export const EXTERNAL_ID_ANNOTATION = ANNOTATION.externalId;
/** How long a pool's "at capacity" must hold before a waiting create is told 429. */
const CAPACITY_GRACE_MS = 2_000;
/**
 * How long this process trusts its own write over its cache. The informer normally catches up in
 * milliseconds; the bound only matters if a watch event is lost (a relist then repairs the cache).
 */
const OWN_WRITE_HOLD_MS = 60_000;
/** How long a create waits for a deleted sandbox of the same name to finish terminating. */
const TERMINATING_WAIT_MS = 60_000;

/** Why a sandbox cannot be handed out (mapped to HTTP by the API layer). */
export class SandboxUnavailable extends Error {
  readonly kind: "capacity" | "failed" | "packages" | "quota" | "timeout";
  readonly retryAfterS: number | undefined;
  constructor(kind: SandboxUnavailable["kind"], message: string, retryAfterS?: number) {
    super(message);
    this.kind = kind;
    this.retryAfterS = retryAfterS;
  }
}

/**
 * Whether a sandbox is Ready (it), can no longer become Ready (why), or not yet (undefined):
 * the part of waiting for a sandbox every store shares. `unexplained` ends a failure message
 * the sandbox's conditions give no reason for.
 */
export function readiness(
  name: string,
  s: Sandbox | undefined,
  unexplained: string,
): Sandbox | SandboxUnavailable | undefined {
  if (!s) return new SandboxUnavailable("failed", `sandbox ${name} was deleted`);
  if (s.status?.phase === "Ready" && s.status.endpoint) return s;
  if (s.status?.phase === "Failed") {
    const ready = s.status.conditions?.find((c) => c.type === "Ready");
    return new SandboxUnavailable(
      ready?.reason === "PackageInstallFailed" ? "packages" : "failed",
      `sandbox ${name} failed: ${ready?.message ?? unexplained}`,
    );
  }
  return undefined;
}

const hash = (...parts: string[]) => createHash("sha256").update(parts.join("\0")).digest("hex");

/** The name of a tenant's sandbox for a (user, thread); undefined without a thread. */
export function threadSandboxName(
  tenant: string,
  userId: string,
  threadId: string | undefined,
): string | undefined {
  return threadId ? `sbx-${hash(tenant, userId, threadId).slice(0, 20)}` : undefined;
}

export function externalSandboxName(tenant: string, externalId: string): string {
  return `df-${hash(tenant, externalId).slice(0, 20)}`;
}

const LABEL_VALUE = /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

/**
 * An id as a label value: itself when Kubernetes accepts it as one (so existing selectors and
 * Sandboxes keep working), else `h.` and a hash. The ids the APIs accept never contain a '.',
 * so a hashed value cannot be mistaken for another id.
 */
export function labelSafe(id: string): string {
  return LABEL_VALUE.test(id) ? id : `h.${hash(id).slice(0, 40)}`;
}

/** Who a sandbox serves: label-safe values to select by, the ids as given in annotations. */
export function identity(
  userId: string,
  threadId: string | undefined,
): { labels: Record<string, string>; annotations: Record<string, string> } {
  return {
    labels: {
      [LABEL.user]: labelSafe(userId),
      ...(threadId ? { [LABEL.thread]: labelSafe(threadId) } : {}),
    },
    annotations: {
      [ANNOTATION.user]: userId,
      ...(threadId ? { [ANNOTATION.thread]: threadId } : {}),
    },
  };
}

export class SandboxStore implements SandboxBackend {
  readonly namespace: string;
  readonly #kube: Kube;
  readonly #informer: Informer<Sandbox>;
  /** The namespace's pools: a create reads its pool from here, not from the API server. */
  readonly #pools: Informer<SandboxPool>;
  readonly #log: Logger;
  readonly #waiters = new Map<string, Set<(s: Sandbox | undefined) => void>>();
  readonly #tokens = new Map<string, string>(); // by Sandbox uid
  readonly #lastActivity = new Map<string, number>();
  readonly #activityIntervalMs: number;
  /** The platform's resource bounds, for creates whose pool sets none (./limits.ts). */
  readonly #bounds: PlatformBounds;
  /**
   * Read-your-writes: what this process created or deleted, until its informer shows it. Without
   * it a create followed at once by a quota check, or a delete followed by a get, would read the
   * cache from before the write. `undefined` marks a deletion (with the uid it deleted).
   */
  readonly #ownWrites = new Map<string, { sandbox?: Sandbox; deletedUid?: string; at: number }>();
  /**
   * Creates this process has sent and not yet seen answered, by name. Concurrent creates of one
   * name share one API call; and they count against their tenant's quota, so concurrent creates
   * cannot pass it together, yet run in parallel.
   */
  readonly #creating = new Map<string, { tenant: string; made: Promise<Sandbox | undefined> }>();
  /**
   * This process's last suspend or resume of a sandbox, by name, until the operator's status
   * shows it observed. Until then a Ready read is the pod from before the write (one being
   * stopped, after a pause then a resume) and its address must not be handed out, and the
   * cached spec is corrected to what was written (so a pause is seen as a pause at once).
   */
  readonly #lifecycleWrites = new Map<string, { generation: number; suspended: boolean }>();
  /** Warm pods this replica holds for creates (the fast path); undefined: off. */
  readonly #reservations: Reservations | undefined;
  /**
   * Sandboxes this process answered for from a reserved warm pod, by name, until the operator's
   * status reports them: their address and readiness are known here first.
   */
  readonly #fastReady = new Map<string, FastReady>();

  constructor(
    kube: Kube,
    namespace: string,
    logger: Logger,
    activityIntervalMs: number,
    bounds: PlatformBounds,
    reservations?: Reservations,
  ) {
    this.#kube = kube;
    this.#reservations = reservations;
    this.#bounds = bounds;
    this.namespace = namespace;
    this.#log = logger;
    this.#activityIntervalMs = activityIntervalMs;
    this.#informer = new Informer<Sandbox>(kube, { resource: SANDBOXES, namespace, logger });
    this.#pools = new Informer<SandboxPool>(kube, { resource: POOLS, namespace, logger });
    const notify = (s: Sandbox) => {
      this.#caughtUp(s, false);
      const fast = this.#fastReady.get(s.metadata.name);
      if (fast && (fast.uid !== s.metadata.uid || s.status?.phase))
        this.#fastReady.delete(s.metadata.name);
      if (this.#observed(s)) this.#lifecycleWrites.delete(s.metadata.name);
      for (const w of this.#waiters.get(s.metadata.name) ?? []) w(s);
    };
    this.#informer.on("add", notify);
    this.#informer.on("update", notify);
    this.#informer.on("delete", (s) => {
      this.#caughtUp(s, true);
      this.#tokens.delete(s.metadata.uid!);
      this.#lastActivity.delete(s.metadata.name);
      this.#lifecycleWrites.delete(s.metadata.name);
      this.#fastReady.delete(s.metadata.name);
      for (const w of this.#waiters.get(s.metadata.name) ?? []) w(undefined);
    });
  }

  get synced(): Promise<void> {
    return this.#informer.synced;
  }

  get isSynced(): boolean {
    return this.#informer.isSynced;
  }

  start(): void {
    this.#informer.start();
    this.#pools.start();
  }

  stop(): void {
    this.#informer.stop();
    this.#pools.stop();
  }

  /** A tenant's sandbox by name; another tenant's is reported as missing. */
  get(tenant: string, name: string): Sandbox | undefined {
    const s = this.#lookup(name);
    return s && s.metadata.labels?.[LABEL.tenant] === tenant ? s : undefined;
  }

  /** Any tenant's sandbox: only for a capability URL, which the capability itself authorises. */
  getAnyTenant(name: string): Sandbox | undefined {
    return this.#lookup(name);
  }

  list(tenant: string, labels: Record<string, string> = {}): Sandbox[] {
    const byName = new Map(this.#informer.list(this.namespace).map((s) => [s.metadata.name, s]));
    for (const [name, w] of this.#freshOwnWrites()) {
      if (w.sandbox) byName.set(name, w.sandbox);
      else byName.delete(name);
    }
    return [...byName.values()]
      .filter((s) => s.metadata.labels?.[LABEL.tenant] === tenant && !s.metadata.deletionTimestamp)
      .filter((s) => Object.entries(labels).every(([k, v]) => s.metadata.labels?.[k] === v));
  }

  /**
   * Every tenant's live sandboxes: only for finding the one a credential that names no tenant
   * (a signed E2B file URL) was made for.
   */
  listAllTenants(): Sandbox[] {
    return this.#informer
      .list(this.namespace)
      .map((s) => this.#lookup(s.metadata.name))
      .filter((s): s is Sandbox => !!s && !s.metadata.deletionTimestamp);
  }

  /**
   * The SandboxPool of that name: from the watch's cache, or (a pool the cache does not show
   * yet, just created) as the API server has it now; undefined when there is none.
   */
  async getPool(name: string): Promise<SandboxPool | undefined> {
    const cached = this.#pools.get(name, this.namespace);
    if (cached && !cached.metadata.deletionTimestamp) return cached;
    try {
      return await this.#kube.get<SandboxPool>(POOLS, this.namespace, name);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** Whether the operator's status of `s` reflects this process's last suspend or resume. */
  #observed(s: Sandbox): boolean {
    const written = this.#lifecycleWrites.get(s.metadata.name);
    return !written || (s.status?.observedGeneration ?? 0) >= written.generation;
  }

  /**
   * The cache, corrected by this process's own writes it does not show yet, and Ready when this
   * process readied it from a reserved pod before the operator reported it.
   */
  #lookup(name: string): Sandbox | undefined {
    const own = this.#freshOwnWrites().get(name);
    const s = this.#fastened(own ? own.sandbox : this.#informer.get(name, this.namespace));
    const written = this.#lifecycleWrites.get(name);
    if (!s || !written || this.#observed(s)) return s;
    return {
      ...s,
      spec: { ...s.spec, lifecycle: { ...s.spec.lifecycle, suspended: written.suspended } },
    };
  }

  #fastened(s: Sandbox | undefined): Sandbox | undefined {
    const fast = s && this.#fastReady.get(s.metadata.name);
    if (!s || !fast || fast.uid !== s.metadata.uid || s.status?.phase) return s;
    return {
      ...s,
      status: { ...s.status, phase: "Ready", endpoint: fast.endpoint, podName: fast.podName },
    };
  }

  /**
   * The own writes the cache does not show yet. Checked against the cache at every read, not
   * only as its events arrive: an event can come before its write is recorded here (a create
   * is recorded once the fast path's /v1/init is done, and the operator may have made the
   * sandbox Ready meanwhile), and an own write believed over a newer cache would hide the
   * Ready status until no event comes to correct it.
   */
  #freshOwnWrites() {
    const now = Date.now();
    for (const [name, w] of this.#ownWrites) {
      const cached = this.#informer.get(name, this.namespace);
      if (now - w.at > OWN_WRITE_HOLD_MS || (cached && this.#shows(w, cached, false)))
        this.#ownWrites.delete(name);
    }
    return this.#ownWrites;
  }

  /** The informer delivered `s`: an own write it now shows is no longer needed. */
  #caughtUp(s: Sandbox, deleted: boolean): void {
    const own = this.#ownWrites.get(s.metadata.name);
    if (own && this.#shows(own, s, deleted)) this.#ownWrites.delete(s.metadata.name);
  }

  /** Whether the cache's `s` (or its deletion) is as new as this process's own write. */
  #shows(own: { sandbox?: Sandbox; deletedUid?: string }, s: Sandbox, deleted: boolean): boolean {
    return own.sandbox
      ? own.sandbox.metadata.uid === s.metadata.uid || deleted
      : deleted || !!s.metadata.deletionTimestamp || s.metadata.uid !== own.deletedUid;
  }

  /**
   * A tenant's sandbox as the API server has it now, for an answer that must not trail a write
   * another replica made (this process's cache learns of it a moment later).
   */
  async getLive(tenant: string, name: string): Promise<Sandbox | undefined> {
    const s = await this.#read(name);
    return s?.metadata.labels?.[LABEL.tenant] === tenant ? s : undefined;
  }

  /** The sandbox of that name as the API server has it now, or undefined. */
  async #read(name: string): Promise<Sandbox | undefined> {
    try {
      return await this.#kube.get<Sandbox>(SANDBOXES, this.namespace, name);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  count(tenant: string): number {
    return this.list(tenant).length;
  }

  /**
   * Creates the sandbox, or returns the existing one of the same name (idempotent). A sandbox of
   * that name still terminating is waited out first, so a thread deleted and at once created
   * again gets a new sandbox, never the dying one.
   */
  async create(input: CreateInput): Promise<{ sandbox: Sandbox; created: boolean }> {
    // Before anything is written: an unknown pool is a 404, limits out of bounds a 400.
    const pool = await existingPool(input.pool, (p) => this.getPool(p));
    admitResources(input, pool, this.#bounds);
    if (pool) this.#reservations?.serve(pool);
    const name = input.name ?? `sbx-${randomBytes(10).toString("hex")}`;
    for (let attempt = 0; ; attempt++) {
      const found = await this.#findOrCreate(name, input, pool);
      if (found.sandbox.metadata.deletionTimestamp) {
        if (attempt > 0)
          throw new SandboxUnavailable("failed", `sandbox ${name} is still being deleted`, 5);
        await this.#waitGone(name, TERMINATING_WAIT_MS);
        continue;
      }
      if (found.sandbox.metadata.labels?.[LABEL.tenant] !== input.tenant)
        throw new SandboxUnavailable("failed", `sandbox name ${name} is taken`);
      return found;
    }
  }

  /** The sandbox of that name as it is: this process's view, its own create, or the API's. */
  async #findOrCreate(
    name: string,
    input: CreateInput,
    pool: SandboxPool | undefined,
  ): Promise<{ sandbox: Sandbox; created: boolean }> {
    // The cache may not yet show a delete another replica just made, so a sandbox found there
    // is confirmed by a read: a create right after that delete makes a new sandbox, never
    // answers with the one going away.
    if (this.#lookup(name)) {
      const live = await this.#read(name);
      if (live) return { sandbox: live, created: false };
    }
    const joined = this.#creating.get(name);
    const made = joined ? await joined.made : await this.#createOnce(name, input, pool);
    if (made) return { sandbox: made, created: !joined };
    // Someone else (another replica) created it first: theirs is the one.
    return {
      sandbox: await this.#kube.get<Sandbox>(SANDBOXES, this.namespace, name),
      created: false,
    };
  }

  /** One create call for `name`, counted against the quota while it is on its way. */
  #createOnce(
    name: string,
    input: CreateInput,
    pool: SandboxPool | undefined,
  ): Promise<Sandbox | undefined> {
    // A create in flight whose Sandbox the cache already shows (its watch event can arrive
    // before its own answer) is one sandbox, not two.
    const live = new Set(this.list(input.tenant).map((s) => s.metadata.name));
    let inFlight = 0;
    for (const [n, c] of this.#creating) if (c.tenant === input.tenant && !live.has(n)) inFlight++;
    if (input.quota !== undefined && live.size + inFlight >= input.quota) {
      throw new SandboxUnavailable(
        "quota",
        `this API key may hold ${input.quota} sandboxes at once; delete some first`,
        30,
      );
    }
    const made = this.#createObject(name, input, pool).then(
      (sandbox) => {
        // In the same turn as leaving #creating: counted once, never missed.
        if (sandbox) this.#ownWrites.set(name, { sandbox, at: Date.now() });
        this.#creating.delete(name);
        return sandbox;
      },
      (err: unknown) => {
        this.#creating.delete(name);
        throw err;
      },
    );
    this.#creating.set(name, { tenant: input.tenant, made });
    return made;
  }

  /**
   * The new Sandbox, or undefined when one of that name exists already. With a reserved warm pod
   * to hand out, the Sandbox names it (the create is the one write, and the claim) and the pod
   * is initialised for it before this returns: the sandbox is Ready here before the operator
   * has written anything.
   */
  async #createObject(
    name: string,
    input: CreateInput,
    pool: SandboxPool | undefined,
  ): Promise<Sandbox | undefined> {
    const reservations = this.#reservations;
    const reserved =
      reservations && pool && fastEligible(input, pool)
        ? await reservations.take(pool.metadata.name)
        : undefined;
    const body: Sandbox = {
      apiVersion: `${SANDBOXES.group}/${SANDBOXES.version}`,
      kind: "Sandbox",
      metadata: {
        name,
        namespace: this.namespace,
        labels: {
          ...input.labels,
          [LABEL.managedBy]: MANAGED_BY.provisioner,
          [LABEL.tenant]: input.tenant,
        },
        annotations: {
          ...input.annotations,
          ...(reserved ? reservedAnnotations(reserved, reservations!.holder) : {}),
        },
      },
      spec: { ...(input.pool ? { poolRef: input.pool } : {}), ...input.spec } as SandboxSpec,
    };
    let made: Sandbox;
    try {
      made = await this.#kube.create(SANDBOXES, body);
      faultFail("provisioner-create-answer-lost");
    } catch (err) {
      if (reserved) {
        // Refused by the API server (a namesake exists, or the object was invalid): no Sandbox
        // names the pod, so it is still this replica's to hand out. Any other failure (a
        // timeout, a cut connection, a 5xx) may have come after the Sandbox was written: a
        // Sandbox may name the pod, and handing it to another create would give one pod to two
        // sandboxes. It is let go instead, once it is clear no Sandbox names it.
        if (refused(err)) reservations!.giveBack(reserved);
        else reservations!.letGo(reserved, (pod) => this.#namesPod(pod));
      }
      if (isAlreadyExists(err)) return undefined;
      throw err;
    }
    if (reserved) await this.#readyFromReserved(made, reserved, pool!);
    return made;
  }

  /** Whether a Sandbox this replica sees names `pod` as its reserved warm pod. */
  #namesPod(pod: string): boolean {
    return this.#informer
      .list(this.namespace)
      .some((s) => s.metadata.annotations?.[RESERVATION.pod] === pod);
  }

  /**
   * Initialises the reserved pod for `made`. A pod that cannot be initialised is left to the
   * operator, which adopts it (or another) for the Sandbox that names it; the create then waits
   * for its status like any other.
   */
  async #readyFromReserved(made: Sandbox, reserved: Reserved, pool: SandboxPool): Promise<void> {
    if (!this.#reservations!.holding) {
      this.#log.warn(
        { sandbox: made.metadata.name, pod: reserved.podName },
        "the reservation Lease went stale during the create; waiting for the operator",
      );
      return;
    }
    try {
      const fast = await initReserved(this.#reservations!, reserved, made, pool);
      const at = { sandbox: made.metadata.name, pod: reserved.podName };
      if (fast.operatorFirst)
        this.#log.info(at, "the operator initialised the reserved warm pod first");
      else this.#log.debug(at, "initialised the reserved warm pod");
      this.#tokens.set(fast.uid, fast.token);
      this.#fastReady.set(made.metadata.name, fast);
      // Being created is activity: the first command needs no activity write of its own.
      this.#lastActivity.set(made.metadata.name, Date.now());
    } catch (err) {
      // Packages that do not install fail the operator's /v1/init too, which reports it: the
      // create sees the Failed status, as a create without the fast path would.
      this.#log.warn(
        { err, sandbox: made.metadata.name, pod: reserved.podName },
        "could not initialise the reserved warm pod; waiting for the operator",
      );
    }
  }

  /** Resolves once no Sandbox of that name exists, or after `timeoutMs` (the caller re-reads). */
  async #waitGone(name: string, timeoutMs: number): Promise<void> {
    let stop = () => {};
    const deleted = new Promise<void>((resolve) => {
      const set = this.#waiters.get(name) ?? new Set();
      this.#waiters.set(name, set);
      const check = (s: Sandbox | undefined) => {
        if (!s) stop();
      };
      const timer = setTimeout(() => stop(), timeoutMs);
      stop = () => {
        clearTimeout(timer);
        set.delete(check);
        if (!set.size) this.#waiters.delete(name);
        resolve();
      };
      set.add(check); // before the read below, so a deletion in between is not missed
    });
    try {
      await this.#kube.get<Sandbox>(SANDBOXES, this.namespace, name);
    } catch (err) {
      if (!isNotFound(err)) throw err;
      stop();
    }
    await deleted;
  }

  /**
   * Resolves with the sandbox once Ready. A pool at its cap under Reject, a Failed sandbox, a
   * deletion or the deadline end the wait with a SandboxUnavailable.
   */
  async waitReady(name: string, timeoutMs: number, signal?: AbortSignal): Promise<Sandbox> {
    const verdict = (s: Sandbox | undefined): Sandbox | SandboxUnavailable | undefined => {
      if (s && !this.#observed(s)) return undefined;
      const v = readiness(name, s, "see its events");
      if (v || !s) return v;
      const cap = s.status?.conditions?.find(
        (c) => c.type === "CapacityExceeded" && c.status === "True",
      );
      if (cap) return new SandboxUnavailable("capacity", cap.message, 5);
      return undefined;
    };
    const current = this.#lookup(name);
    if (current) {
      const v = verdict(current);
      if (v instanceof SandboxUnavailable && v.kind !== "capacity") throw v;
      if (v && !(v instanceof SandboxUnavailable)) return v;
    } // else: just created, its add event is on the way
    return new Promise<Sandbox>((resolve, reject) => {
      const set = this.#waiters.get(name) ?? new Set();
      this.#waiters.set(name, set);
      // "At capacity" is only believed once it has held for a moment: a status read just after
      // a slot freed still says so until the operator admits the sandbox.
      let capacity: NodeJS.Timeout | undefined;
      const done = () => {
        clearTimeout(timer);
        clearTimeout(capacity);
        signal?.removeEventListener("abort", onAbort);
        set.delete(check);
        if (!set.size) this.#waiters.delete(name);
      };
      const check = (s: Sandbox | undefined) => {
        const v = verdict(s);
        if (v instanceof SandboxUnavailable && v.kind === "capacity") {
          capacity ??= setTimeout(() => {
            done();
            reject(v);
          }, CAPACITY_GRACE_MS);
          return;
        }
        clearTimeout(capacity);
        capacity = undefined;
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
      if (current) check(current); // start the capacity grace for a sandbox already waiting
    });
  }

  async delete(name: string): Promise<void> {
    const uid = this.#lookup(name)?.metadata.uid;
    await this.#kube.delete(SANDBOXES, this.namespace, name);
    this.#ownWrites.set(name, { ...(uid ? { deletedUid: uid } : {}), at: Date.now() });
  }

  /** Changes the lifetime settings (a merge: fields not given keep their value). */
  async setLifecycle(
    name: string,
    lifecycle: { ttlSeconds?: number; idleTimeoutSeconds?: number },
  ): Promise<Sandbox> {
    return this.#kube.patch<Sandbox>(SANDBOXES, this.namespace, name, "merge", {
      spec: { lifecycle },
    });
  }

  async setSuspended(name: string, suspended: boolean): Promise<void> {
    const written = await this.#kube.patch<Sandbox>(SANDBOXES, this.namespace, name, "merge", {
      spec: { lifecycle: { suspended } },
    });
    const generation = written.metadata.generation;
    if (generation !== undefined && (written.status?.observedGeneration ?? 0) < generation)
      this.#lifecycleWrites.set(name, { generation, suspended });
    // Resuming also reports activity, which wakes a sandbox the operator suspended (idle, LRU).
    if (!suspended) await this.reportActivity(name, true);
  }

  /**
   * Reports activity on the Sandbox's status, at most once per interval per sandbox unless
   * forced (a keepalive, a resume). Failures are logged: activity is advisory.
   */
  async reportActivity(name: string, force = false): Promise<void> {
    const now = Date.now();
    if (!force && now - (this.#lastActivity.get(name) ?? 0) < this.#activityIntervalMs) return;
    this.#lastActivity.set(name, now);
    try {
      await this.#kube.patch(
        SANDBOXES,
        this.namespace,
        name,
        "merge",
        { status: { lastActivityTime: new Date(now).toISOString() } },
        "status",
      );
    } catch (err) {
      if (!isNotFound(err)) this.#log.warn({ err, sandbox: name }, "could not report activity");
    }
  }

  /**
   * sandboxd's bearer token, from the Secret the operator made and names in the status (read
   * once per sandbox).
   */
  async token(s: Sandbox): Promise<string> {
    const uid = s.metadata.uid!;
    const cached = this.#tokens.get(uid);
    if (cached) return cached;
    const secretName = s.status?.tokenSecretRef;
    if (!secretName)
      throw new Error(`the operator has not reported ${s.metadata.name}'s token yet`);
    const secret = await this.#kube.get<KObject & { data?: Record<string, string> }>(
      SECRETS,
      this.namespace,
      secretName,
    );
    const token = Buffer.from(secret.data?.token ?? "", "base64").toString();
    if (!token) throw new Error(`the token Secret of ${s.metadata.name} is empty`);
    this.#tokens.set(uid, token);
    return token;
  }
}

/**
 * An API server's refusal of a write, which says the object was not written: a 4xx but a
 * timeout or throttling (408, 429), which it may answer after all.
 */
function refused(err: unknown): boolean {
  return (
    err instanceof KubeApiError &&
    err.status >= 400 &&
    err.status < 500 &&
    err.status !== 408 &&
    err.status !== 429
  );
}
