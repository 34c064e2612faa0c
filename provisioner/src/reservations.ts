/**
 * This replica's reservation of warm pods (docs/architecture.md, "The warm create"): per pool it
 * serves, a few claimable warm pods are marked as held by this replica, ahead of demand, with a
 * resourceVersion-guarded patch, so a create can hand one out without waiting on the API
 * server. The holder is a Lease this replica renews; the operator adopts a reserved pod only
 * for the Sandbox that names it, and gives the reservations of a holder whose Lease ran out back
 * to the pool. On shutdown the reservations are released and the Lease deleted.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import {
  ANNOTATION,
  LABEL,
  LEASES,
  type Lease,
  MANAGED_BY,
  RESERVATION,
  type SandboxPool,
  TOKEN_KEY_SECRET,
  faultPoint,
  keyFingerprint,
  warmPodToken,
} from "@sandpit/operator/api";
import {
  Informer,
  type Kube,
  PODS,
  type Pod,
  SECRETS,
  type Secret,
  isConflict,
  isNotFound,
} from "@sandpit/operator/kube/client";

/** A warm pod this replica holds, as a create needs it. */
export interface Reserved {
  pool: string;
  podName: string;
  podIP: string;
  /**
   * The random id the pod's own warm token is derived with (its ANNOTATION.warmTokenId);
   * undefined for a pod made before warm tokens were per pod, opened with the pool's token.
   */
  tokenId?: string;
  /** The fingerprint of the token key the pod's warm token was derived from. */
  keyFingerprint?: string;
}

export interface ReservationOptions {
  /** How many claimable warm pods to hold per pool. */
  size: number;
  /** The Lease's duration; it is renewed every third of it. */
  leaseSeconds: number;
}

/** MicroTime as the API wants it: RFC 3339 with microseconds. */
const microTime = (d = new Date()) => d.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
/**
 * How long after a create whose answer was lost its write may still land (the API server's own
 * request timeout is 60 s): until then a pod it may have named is not released.
 */
const LET_GO_SETTLE_MS = 90_000;

export class Reservations {
  /** The holder's name: its Lease's, and the value of the reservation annotation. */
  readonly holder = `sandpit-provisioner-${randomBytes(6).toString("hex")}`;
  readonly #kube: Kube;
  readonly #ns: string;
  readonly #log: Logger;
  readonly #opts: ReservationOptions;
  readonly #pods: Informer<Pod>;
  /** Reserved and not yet handed out, by pod name. */
  readonly #held = new Map<string, Reserved>();
  /**
   * Pods handed to a create, until they leave the warm pods (claimed or deleted). One of them is
   * never reserved again, whatever its annotations say: it may hold a sandbox's token already.
   */
  readonly #handedOut = new Set<string>();
  /** Pods a reservation patch is on its way for (no other take picks them meanwhile). */
  readonly #reserving = new Set<string>();
  /** The pools served, with what a pod of theirs needs to be claimable. */
  readonly #pools = new Map<string, { packages: boolean }>();
  readonly #secrets = new Map<string, Promise<string>>();
  #renewedAt = -Infinity;
  #renewer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(kube: Kube, namespace: string, logger: Logger, opts: ReservationOptions) {
    this.#kube = kube;
    this.#ns = namespace;
    this.#log = logger.child({ holder: this.holder });
    this.#opts = opts;
    this.#pods = new Informer<Pod>(kube, {
      resource: PODS,
      namespace,
      labelSelector: `${LABEL.warm}=true`,
      logger,
    });
    const changed = (p: Pod) => {
      const held = this.#held.get(p.metadata.name);
      // Taken by the operator, deleted or given back by it: no longer this replica's.
      if (held && !this.#mine(p)) this.#held.delete(p.metadata.name);
      this.#topUp(p.metadata.labels?.[LABEL.pool]);
    };
    this.#pods.on("add", changed);
    this.#pods.on("update", changed);
    this.#pods.on("delete", (p) => {
      this.#held.delete(p.metadata.name);
      this.#handedOut.delete(p.metadata.name);
      this.#topUp(p.metadata.labels?.[LABEL.pool]);
    });
  }

  /** Creates the Lease, then watches warm pods; reservations start once both are in place. */
  async start(): Promise<void> {
    await this.#createLease();
    this.#renewer = setInterval(() => void this.#renew(), (this.#opts.leaseSeconds * 1000) / 3);
    this.#renewer.unref();
    this.#pods.start();
    await this.#pods.synced;
    for (const pool of this.#pools.keys()) this.#topUp(pool);
  }

  // Renewals count from when they were sent, not answered: the operator's clock starts at the
  // renewTime written, and a slow answer must not stretch this replica's view past it.
  async #createLease(): Promise<void> {
    const sent = performance.now();
    await this.#kube.create<Lease>(LEASES, {
      metadata: {
        name: this.holder,
        namespace: this.#ns,
        labels: { [RESERVATION.leaseLabel]: "true", [LABEL.managedBy]: MANAGED_BY.provisioner },
      },
      spec: {
        holderIdentity: this.holder,
        leaseDurationSeconds: this.#opts.leaseSeconds,
        renewTime: microTime(),
      },
    });
    this.#renewedAt = sent;
  }

  /** Releases every pod still held and deletes the Lease (the operator need not wait it out). */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#renewer);
    this.#pods.stop();
    const held = [...this.#held.keys()];
    this.#held.clear();
    await Promise.allSettled(held.map((name) => this.#mark(name, null)));
    await this.#kube.delete(LEASES, this.#ns, this.holder).catch(() => undefined);
  }

  /** From now on this replica holds warm pods of `pool` too. */
  serve(pool: SandboxPool): void {
    const packages = (pool.spec.template.packages?.length ?? 0) > 0;
    if (this.#pools.get(pool.metadata.name)?.packages === packages) return;
    this.#pools.set(pool.metadata.name, { packages });
    this.#topUp(pool.metadata.name);
  }

  /**
   * A reserved pod of `pool` for a create, taken out of the reservation: one held already, else
   * one reserved now (a burst larger than the reservation costs that patch), else undefined
   * and the create goes the operator's way. Never while this replica's Lease may have lapsed:
   * the operator may be giving its reservations back.
   */
  async take(pool: string): Promise<Reserved | undefined> {
    if (!this.#live()) return undefined;
    for (const [name, r] of this.#held) {
      if (r.pool !== pool) continue;
      this.#held.delete(name);
      this.#handedOut.add(name);
      this.#topUp(pool);
      return r;
    }
    for (let attempt = 0; attempt < 3; attempt++) {
      const r = await this.#reserveOne(pool);
      if (r === "conflict") continue;
      if (r) this.#handedOut.add(r.podName);
      return r;
    }
    return undefined;
  }

  /**
   * A taken pod whose create the API server refused (its Sandbox existed already, or was
   * invalid): no Sandbox names it, so it is held again.
   */
  giveBack(r: Reserved): void {
    const pod = this.#pods.get(r.podName, this.#ns);
    this.#handedOut.delete(r.podName); // never initialised: its create was refused
    if (pod && this.#mine(pod)) this.#held.set(r.podName, r);
  }

  /**
   * A taken pod whose create failed without saying whether its Sandbox was written (a timeout,
   * a cut connection, a 5xx): a Sandbox may name it, so this replica never hands it out again.
   * Once any such write has settled (`settleMs`), a pod no Sandbox names (`named`) has its
   * reservation removed, guarded by its resourceVersion, and the pool has it back; a pod a
   * Sandbox names is the operator's to adopt for it.
   */
  letGo(r: Reserved, named: (pod: string) => boolean, settleMs = LET_GO_SETTLE_MS): void {
    this.#held.delete(r.podName);
    this.#log.warn(
      { pod: r.podName },
      "a create that reserved this pod failed without saying whether its Sandbox was written; the pod is not handed out again",
    );
    const timer = setTimeout(() => {
      const pod = this.#pods.get(r.podName, this.#ns);
      if (!pod || !this.#mine(pod) || named(r.podName)) return;
      // No Sandbox names it, so no create initialised it: it may serve another create.
      void this.#mark(r.podName, null, pod.metadata.resourceVersion).then(
        (released) => released && this.#handedOut.delete(r.podName),
        (err: unknown) =>
          this.#log.warn({ err, pod: r.podName }, "could not release a warm pod's reservation"),
      );
    }, settleMs);
    timer.unref();
  }

  /**
   * Whether a pod taken a moment ago may still be used: this replica's Lease is fresh now too,
   * so no operator can have given its reservations back while the create was on its way.
   */
  get holding(): boolean {
    return this.#live();
  }

  /**
   * The token a reserved pod's blank sandboxd accepts: its own, derived from the key, its name
   * and its token id (warmPodToken), so it opens that pod and no other. A pod made before warm
   * tokens were per pod has none: the pool's token from the Secret `<pool>-warm-token` (read
   * once), as then.
   */
  async warmToken(r: Reserved): Promise<string> {
    if (!r.tokenId) return this.#secret(`${r.pool}-warm-token`, "token");
    let key = await this.tokenKey();
    if (r.keyFingerprint && keyFingerprint(key) !== r.keyFingerprint) {
      // The key was replaced since it was read: read it again.
      this.#secrets.delete(TOKEN_KEY_SECRET);
      key = await this.tokenKey();
    }
    return warmPodToken(key, this.#ns, r.podName, r.tokenId);
  }

  /** The key reserved sandboxes' and warm pods' tokens are derived from (read once, and again when a pod names a newer one). */
  tokenKey(): Promise<string> {
    return this.#secret(TOKEN_KEY_SECRET, "key");
  }

  /** How many pods this replica holds now (for tests and metrics). */
  get heldCount(): number {
    return this.#held.size;
  }

  #secret(name: string, field: string): Promise<string> {
    let value = this.#secrets.get(name);
    if (!value) {
      value = this.#kube.get<Secret>(SECRETS, this.#ns, name).then((s) => {
        const v = Buffer.from(s.data?.[field] ?? "", "base64").toString();
        if (!v) throw new Error(`Secret ${name} has no ${field}`);
        return v;
      });
      value.catch(() => this.#secrets.delete(name)); // asked again next time
      this.#secrets.set(name, value);
    }
    return value;
  }

  /** The Lease was renewed recently enough that no operator can consider this holder gone. */
  #live(): boolean {
    return (
      !this.#stopped && performance.now() - this.#renewedAt < (this.#opts.leaseSeconds * 1000) / 2
    );
  }

  async #renew(): Promise<void> {
    const sent = performance.now();
    try {
      await this.#kube.patch(LEASES, this.#ns, this.holder, "merge", {
        spec: { renewTime: microTime() },
      });
      this.#renewedAt = Math.max(this.#renewedAt, sent);
    } catch (err) {
      this.#log.warn({ err }, "could not renew the reservation Lease");
      // Deleted (by hand, or by a cleanup): made again, the reservations are still annotated.
      if (isNotFound(err) && !this.#stopped) await this.#createLease().catch(() => undefined);
    }
  }

  #mine(p: Pod): boolean {
    return (
      p.metadata.annotations?.[RESERVATION.holder] === this.holder &&
      p.metadata.labels?.[LABEL.warm] === "true" &&
      !p.metadata.deletionTimestamp
    );
  }

  /** Ready, unreserved, and with the template's packages installed when it has any. */
  #claimable(p: Pod, pool: string): boolean {
    if (p.metadata.labels?.[LABEL.pool] !== pool || p.metadata.deletionTimestamp) return false;
    const name = p.metadata.name;
    if (p.metadata.annotations?.[RESERVATION.holder] || this.#reserving.has(name)) return false;
    if (this.#handedOut.has(name)) return false;
    const ready = p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
    if (!ready || !p.status?.podIP) return false;
    if (!this.#pools.get(pool)?.packages) return true;
    const restarts = p.status.containerStatuses?.[0]?.restartCount ?? 0;
    return p.metadata.annotations?.[ANNOTATION.packagesReady] === `${p.metadata.uid}/${restarts}`;
  }

  /** Reserves pods of `pool` until this replica holds its share (one pass; events bring more). */
  #topUp(pool: string | undefined): void {
    if (!pool || !this.#pools.has(pool) || !this.#pods.isSynced || !this.#live()) return;
    const have =
      [...this.#held.values()].filter((r) => r.pool === pool).length +
      [...this.#reserving].filter(
        (n) => this.#pods.get(n, this.#ns)?.metadata.labels?.[LABEL.pool] === pool,
      ).length;
    for (let i = have; i < this.#opts.size; i++) {
      void this.#reserveOne(pool).then(
        (r) => {
          if (r && r !== "conflict") {
            if (this.#stopped) void this.#mark(r.podName, null);
            else this.#held.set(r.podName, r);
          }
        },
        (err: unknown) => this.#log.warn({ err, pool }, "could not reserve a warm pod"),
      );
    }
  }

  /** Reserves one claimable pod: it, "conflict" when another took it first, or undefined. */
  async #reserveOne(pool: string): Promise<Reserved | "conflict" | undefined> {
    const pod = this.#pods.list(this.#ns).find((p) => this.#claimable(p, pool));
    if (!pod) return undefined;
    const name = pod.metadata.name;
    this.#reserving.add(name);
    try {
      const marked = await this.#mark(name, this.holder, pod.metadata.resourceVersion);
      if (!marked) return "conflict";
      faultPoint("provisioner-reserved");
      const tokenId = pod.metadata.annotations?.[ANNOTATION.warmTokenId];
      const fingerprint = pod.metadata.annotations?.[ANNOTATION.warmTokenKey];
      return {
        pool,
        podName: name,
        podIP: pod.status!.podIP!,
        ...(tokenId ? { tokenId } : {}),
        ...(fingerprint ? { keyFingerprint: fingerprint } : {}),
      };
    } finally {
      this.#reserving.delete(name);
    }
  }

  /**
   * Sets (or with null removes) the reservation annotation; with `resourceVersion` only if the
   * pod is unchanged since. False when it changed or is gone.
   */
  async #mark(name: string, holder: string | null, resourceVersion?: string): Promise<boolean> {
    try {
      await this.#kube.patch(PODS, this.#ns, name, "merge", {
        metadata: {
          ...(resourceVersion ? { resourceVersion } : {}),
          annotations: { [RESERVATION.holder]: holder },
        },
      });
      return true;
    } catch (err) {
      if (isConflict(err) || isNotFound(err)) return false;
      throw err;
    }
  }
}
