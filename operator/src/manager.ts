/**
 * Wires the operator together, as controller-runtime's manager does: informers start at once on
 * every replica (a standby keeps warm caches, so a failover starts from a synced view), the
 * controllers start only on the leader, /healthz /readyz /metrics answer throughout, and stop()
 * drains the work in flight and hands the lease back.
 */
import { lookup } from "node:dns/promises";
import type { Server } from "node:http";
import type { Logger } from "pino";
import { ANNOTATION, LABEL, MANAGED_BY } from "./api/labels.ts";
import { POOLS, SANDBOXES, type Sandbox, type SandboxPool } from "./api/v1alpha1.ts";
import type { OperatorConfig } from "./config.ts";
import { Census } from "./census.ts";
import { listen, probeServer } from "./probes.ts";
import { type Caches, type Ctx, Expectations, keyOf } from "./context.ts";
import { Controller } from "./controller/controller.ts";
import { EventRecorder } from "./kube/events.ts";
import { Informer } from "./kube/informer.ts";
import { LeaderElector } from "./kube/leader-election.ts";
import {
  type Claim,
  ENDPOINT_SLICES,
  type EndpointSlice,
  NETWORK_POLICIES,
  NODES,
  type Node,
  PODS,
  PVCS,
  type Pod,
  SECRETS,
  STORAGE_CLASSES,
  type Secret,
  type StorageClass,
} from "./kube/resources.ts";
import * as transforms from "./kube/transforms.ts";
import type { Transform } from "./kube/transforms.ts";
import { type KObject, Kube, loadKubeConfig, resourceOfPath } from "./kube/rest.ts";
import {
  apiWrites,
  countFrom,
  informerRestarts,
  leaderElectionStatus,
  registry,
  restRequests,
} from "./metrics.ts";
import { Pools } from "./pool/pools.ts";
import { reconcilePool } from "./pool/reconciler.ts";
import { reconcileSandbox } from "./sandbox/reconciler.ts";
import { PROGRESS_EVERY_MS } from "./sandbox/status.ts";
import { UNUSED_GRACE_MS, reconcileEgressPolicy } from "./network/reconciler.ts";
import { ISOLATION_POLICY, egressPolicyName } from "./workload/network.ts";
import { classesSignature } from "./workload/disk.ts";
import {
  clusterAddressExceptions,
  nodeAddresses,
  sliceAddresses,
  sliceEndpoint,
} from "./workload/egress.ts";
import { INIT_TIMEOUT_MS } from "./workload/sandboxd.ts";

const CACHE_SYNC_TIMEOUT_MS = 120_000;
/** Who the operator writes as (server-side apply field manager). */
const FIELD_MANAGER = "sandpit-operator";
/**
 * A reconcile running longer than this is aborted through its signal. Both reconcilers may wait
 * on sandboxd's /v1/init while it installs packages, so they get that long and a minute more.
 */
const RECONCILE_TIMEOUT_MS = INIT_TIMEOUT_MS + 60_000;

export class Manager {
  readonly ctx: Ctx;
  readonly #cfg: OperatorConfig;
  readonly #log: Logger;
  readonly #informers: Informer<KObject>[];
  readonly #sandboxes: Controller;
  readonly #pools: Controller;
  readonly #policies: Controller;
  readonly #poolState: Pools;
  readonly #elector: LeaderElector | undefined;
  #server: Server | undefined;
  #leading = false;
  /** The cluster's own addresses Internet egress excludes, as last computed from the caches. */
  #clusterAddresses: readonly string[] = [];
  /** The API server's endpoint (host:port) its EndpointSlice showed last. */
  #apiServerEndpoint: string | undefined;
  #stopping: Promise<void> | undefined;
  /** Resolves with why the manager ended on its own (leadership lost). */
  readonly done: Promise<string>;
  #end!: (why: string) => void;

  constructor(cfg: OperatorConfig, log: Logger) {
    this.#cfg = cfg;
    this.#log = log;
    this.done = new Promise((resolve) => (this.#end = resolve));
    const debug = log.isLevelEnabled("debug");
    const kube = new Kube(loadKubeConfig(cfg.kubeconfig), {
      fieldManager: FIELD_MANAGER,
      onResponse: (method, path, status, ms) => {
        restRequests.inc({ method, code: String(status) });
        if (method !== "GET" && status < 400)
          apiWrites.inc({ resource: resourceOfPath(path), verb: method });
        if (debug) log.debug({ method, path, status, ms: Math.round(ms) }, "api request");
      },
    });
    const ns = cfg.watchNamespace;
    const owned = `${LABEL.managedBy}=${MANAGED_BY.operator}`;
    // Each cache keeps only what the reconcilers read of its objects (kube/transforms.ts).
    const informer = <T extends KObject>(
      resource: typeof PODS,
      transform: Transform<T>,
      labelSelector?: string,
      namespace = ns,
    ) => {
      // Every series from 0: the first restart is then an increase Prometheus sees.
      for (const cause of ["error", "stale"])
        informerRestarts.inc({ resource: resource.plural, cause }, 0);
      return new Informer<T>(kube, {
        resource,
        logger: log,
        transform,
        onRestart: (cause) => informerRestarts.inc({ resource: resource.plural, cause }),
        ...(namespace ? { namespace } : {}),
        ...(labelSelector ? { labelSelector } : {}),
      });
    };
    const caches: Caches = {
      sandboxes: informer<Sandbox>(SANDBOXES, transforms.specAndStatus),
      pools: informer<SandboxPool>(POOLS, transforms.specAndStatus),
      pods: informer<Pod>(PODS, transforms.pod, owned),
      claims: informer<Claim>(PVCS, transforms.claim, owned),
      secrets: informer<Secret>(SECRETS, transforms.secret, owned),
      networkPolicies: informer(NETWORK_POLICIES, transforms.metadataOnly, owned),
      // Whatever namespace is watched, the cluster's own addresses are the cluster's.
      nodes: informer<Node>(NODES, transforms.node, undefined, ""),
      apiServerEndpoints: informer<EndpointSlice>(
        ENDPOINT_SLICES,
        transforms.endpointSlice,
        "kubernetes.io/service-name=kubernetes",
        "default",
      ),
      storageClasses: informer<StorageClass>(
        STORAGE_CLASSES,
        transforms.storageClass,
        undefined,
        "",
      ),
    };
    this.#informers = Object.values(caches) as Informer<KObject>[];
    this.#sandboxes = new Controller({
      name: "sandbox",
      logger: log,
      workers: cfg.sandboxWorkers,
      timeoutMs: RECONCILE_TIMEOUT_MS,
      reconcile: (key, signal) => reconcileSandbox(this.ctx, this.#poolState, key, signal),
    });
    this.#pools = new Controller({
      name: "sandboxpool",
      logger: log,
      workers: cfg.poolWorkers,
      timeoutMs: RECONCILE_TIMEOUT_MS,
      reconcile: (key, signal) => reconcilePool(this.ctx, this.#poolState, key, signal),
    });
    this.#policies = new Controller({
      name: "networkpolicy",
      logger: log,
      workers: 1,
      reconcile: (key) => reconcileEgressPolicy(this.ctx, key),
    });
    const identity = cfg.leaderElection.identity;
    this.ctx = {
      kube,
      cfg,
      log,
      events: new EventRecorder(kube, identity, log),
      caches,
      podExpectations: new Expectations(),
      writeExpectations: new Expectations(),
      progressShown: new Expectations(PROGRESS_EVERY_MS),
      clusterAddresses: () => this.#clusterAddresses,
      policyProbe: () =>
        cfg.policyProbe === "off"
          ? undefined
          : cfg.policyProbe === "apiserver"
            ? this.#apiServerEndpoint
            : cfg.policyProbe,
      enqueueSandbox: (key, afterMs) => this.#sandboxes.enqueue(key, afterMs),
      enqueuePool: (key, afterMs) => this.#pools.enqueue(key, afterMs),
    };
    this.#poolState = new Pools(this.ctx);
    if (cfg.leaderElection.enabled) {
      this.#elector = new LeaderElector(kube, {
        ...cfg.leaderElection,
        logger: log,
        onLeading: (leading) =>
          leaderElectionStatus.set({ name: cfg.leaderElection.name }, leading ? 1 : 0),
      });
    }
    this.#wireEvents(caches);
    const census = new Census({
      sandboxes: () => caches.sandboxes.list(),
      pools: () => caches.pools.list(),
    });
    countFrom(() => census.sample());
  }

  get isLeader(): boolean {
    return this.#leading;
  }

  /** Starts probes and informers, then campaigns for leadership and runs the controllers. */
  async start(): Promise<void> {
    this.#server = await this.#serveProbes();
    await this.#resolveEgressProxy();
    for (const i of this.#informers) i.start();
    const synced = Promise.all(this.#informers.map((i) => i.synced));
    const timeout = new Promise<never>((_, reject) =>
      setTimeout(
        () => reject(new Error(`caches did not sync within ${CACHE_SYNC_TIMEOUT_MS / 1000}s`)),
        CACHE_SYNC_TIMEOUT_MS,
      ).unref(),
    );
    await Promise.race([synced, timeout]);
    this.#log.info("caches synced");
    void this.#lead();
  }

  /**
   * The egress proxy's address, from its Service's name, once: sandboxes are handed an address
   * (they have no DNS). Retried for a minute (the Service may be made with the operator), then
   * the operator exits and its restart tries again.
   */
  async #resolveEgressProxy(): Promise<void> {
    const proxy = this.#cfg.egressProxy;
    if (!proxy || proxy.address) return;
    for (let attempt = 1; ; attempt++) {
      try {
        const { address } = await lookup(proxy.host, { family: 4 });
        proxy.address = `${address}:${proxy.port}`;
        this.#log.info({ proxy: proxy.host, address: proxy.address }, "egress proxy resolved");
        return;
      } catch (err) {
        if (attempt >= 30)
          throw new Error(`the egress proxy ${proxy.host} does not resolve`, { cause: err });
        this.#log.warn({ err, proxy: proxy.host }, "egress proxy does not resolve yet");
        await new Promise((r) => setTimeout(r, 2_000));
      }
    }
  }

  async #lead(): Promise<void> {
    if (this.#elector && !(await this.#elector.acquire())) return;
    if (this.#stopping) return;
    this.#leading = true;
    this.#sandboxes.start();
    this.#pools.start();
    this.#policies.start();
    // Everything is reconciled once on taking over: nothing that changed meanwhile is missed.
    for (const s of this.ctx.caches.sandboxes.list()) this.#sandboxes.enqueue(keyOf(s));
    for (const p of this.ctx.caches.pools.list()) this.#pools.enqueue(keyOf(p));
    for (const np of this.ctx.caches.networkPolicies.list()) {
      if (np.metadata.labels?.[LABEL.network]) this.#policies.enqueue(keyOf(np));
    }
    this.#log.info({ sandboxes: this.ctx.caches.sandboxes.list().length }, "controllers started");
    if (this.#elector && (await this.#elector.holdUntilLost()) === "lost") {
      // Another replica may already act: stop at once, without draining (controller-runtime exits too).
      this.#leading = false;
      this.#end("leadership lost");
    }
  }

  /** Graceful shutdown: finish the reconciles in flight, release the lease, stop watching. */
  stop(): Promise<void> {
    this.#stopping ??= (async () => {
      this.#log.info("shutting down");
      await Promise.all([this.#sandboxes.stop(), this.#pools.stop(), this.#policies.stop()]);
      await this.#elector?.release();
      this.#leading = false;
      for (const i of this.#informers) i.stop();
      await new Promise<void>((resolve) =>
        this.#server ? this.#server.close(() => resolve()) : resolve(),
      );
    })();
    return this.#stopping;
  }

  #wireEvents(c: Caches): void {
    const sandboxKeyOf = (o: KObject) => {
      const name = o.metadata.labels?.[LABEL.sandbox];
      return name ? `${o.metadata.namespace}/${name}` : undefined;
    };
    const poolKeyOf = (o: KObject) => {
      const name = o.metadata.labels?.[LABEL.pool];
      return name ? `${o.metadata.namespace}/${name}` : undefined;
    };
    const onSandbox = (s: Sandbox) => {
      this.#sandboxes.enqueue(keyOf(s));
      if (s.spec.poolRef) this.#pools.enqueue(`${s.metadata.namespace}/${s.spec.poolRef}`);
    };
    c.sandboxes.on("add", onSandbox);
    c.sandboxes.on("update", onSandbox);
    c.sandboxes.on("delete", (s) => {
      this.#poolState.forget(s);
      if (s.spec.poolRef) this.#pools.enqueue(`${s.metadata.namespace}/${s.spec.poolRef}`);
    });
    const onPool = (p: SandboxPool) => {
      this.#pools.enqueue(keyOf(p));
      // Members wait on their pool (PoolNotFound, a raised maxActive, a new template).
      for (const s of c.sandboxes.list(p.metadata.namespace)) {
        if (s.spec.poolRef === p.metadata.name) this.#sandboxes.enqueue(keyOf(s));
      }
    };
    c.pools.on("add", onPool);
    c.pools.on("update", onPool);
    c.pools.on("delete", (p) => this.#pools.enqueue(keyOf(p)));
    const onChild = (o: KObject) => {
      const s = sandboxKeyOf(o);
      if (s) this.#sandboxes.enqueue(s);
      const p = poolKeyOf(o);
      if (p) this.#pools.enqueue(p);
    };
    for (const informer of [
      c.pods,
      c.claims,
      c.secrets,
      c.networkPolicies,
    ] as Informer<KObject>[]) {
      informer.on("add", onChild);
      informer.on("update", onChild);
      informer.on("delete", onChild);
    }
    c.pods.on("add", (p) => this.ctx.podExpectations.observed(keyOf(p)));
    c.claims.on("add", (o) =>
      this.ctx.writeExpectations.observed(`persistentvolumeclaims/${keyOf(o)}`),
    );
    this.#watchClusterAddresses(c);
    this.#watchStorageClasses(c);
    const policySeen = (o: KObject) =>
      this.ctx.writeExpectations.observed(
        `networkpolicies/${keyOf(o)}/${o.metadata.annotations?.[ANNOTATION.specHash]}`,
      );
    c.networkPolicies.on("add", policySeen);
    c.networkPolicies.on("update", policySeen);
    this.#wireSharedPolicies(c);
  }

  /**
   * The namespace's shared network policies (network/reconciler.ts): an egress policy is looked
   * at when made and when a pod with its key goes; when one goes, or the isolation policy does,
   * every sandbox and pool of the namespace is reconciled, and whichever needs it makes it again.
   */
  #wireSharedPolicies(c: Caches): void {
    c.pods.on("delete", (p) => {
      const key = p.metadata.labels?.[LABEL.network];
      if (key) {
        this.#policies.enqueue(`${p.metadata.namespace}/${egressPolicyName(key)}`, UNUSED_GRACE_MS);
      }
    });
    c.networkPolicies.on("add", (np) => {
      if (np.metadata.labels?.[LABEL.network]) this.#policies.enqueue(keyOf(np), UNUSED_GRACE_MS);
    });
    c.networkPolicies.on("delete", (np) => {
      if (!np.metadata.labels?.[LABEL.network] && np.metadata.name !== ISOLATION_POLICY) return;
      const ns = np.metadata.namespace;
      for (const s of c.sandboxes.list(ns)) this.#sandboxes.enqueue(keyOf(s));
      for (const p of c.pools.list(ns)) this.#pools.enqueue(keyOf(p));
    });
  }

  /**
   * Keeps #clusterAddresses current: every Node's addresses as they are now, and every address
   * the API server's EndpointSlices have shown since this operator started. Those stay: an API
   * server restarting takes its address out of the slice and puts it back, and forgetting it in
   * between would loosen and tighten every policy for nothing (an address once the API
   * server's is worth excluding until the operator restarts). Nodes are updated often (status,
   * heartbeats) and their addresses almost never: an update showing the addresses the node had
   * is ignored. When the set changes (a node added or gone, the API server moved), every
   * sandbox and pool is reconciled, which rewrites the policies whose hash changed, no other.
   */
  #watchClusterAddresses(c: Caches): void {
    const byNode = new Map<string, string[]>();
    const apiServer = new Set<string>();
    const recompute = () => {
      const next = clusterAddressExceptions([...[...byNode.values()].flat(), ...apiServer]);
      if (next.join() === this.#clusterAddresses.join()) return;
      this.#log.info(
        { before: this.#clusterAddresses, after: next },
        "cluster addresses excluded from egress changed; reconciling every sandbox and pool",
      );
      this.#clusterAddresses = next;
      for (const s of c.sandboxes.list()) this.#sandboxes.enqueue(keyOf(s));
      for (const p of c.pools.list()) this.#pools.enqueue(keyOf(p));
    };
    const onNode = (n: Node) => {
      const addresses = nodeAddresses(n);
      if (byNode.get(n.metadata.name)?.join() === addresses.join()) return;
      byNode.set(n.metadata.name, addresses);
      recompute();
    };
    c.nodes.on("add", onNode);
    c.nodes.on("update", onNode);
    c.nodes.on("delete", (n) => {
      byNode.delete(n.metadata.name);
      recompute();
    });
    const onSlice = (s: EndpointSlice) => {
      for (const a of sliceAddresses(s)) apiServer.add(a);
      this.#apiServerEndpoint = sliceEndpoint(s) ?? this.#apiServerEndpoint;
      recompute();
    };
    c.apiServerEndpoints.on("add", onSlice);
    c.apiServerEndpoints.on("update", onSlice);
  }

  /**
   * A StorageClass annotated (or no longer), made, deleted or made the default changes the
   * DiskEnforced condition of the sandboxes on it: when what decides it changes, every sandbox
   * is reconciled (their status written where the condition changed, no other write). Classes
   * are few and change rarely; updates that change nothing of it are ignored.
   */
  #watchStorageClasses(c: Caches): void {
    let signature: string | undefined;
    const recompute = () => {
      const next = classesSignature(c.storageClasses.list(), this.#cfg.capacityEnforcingClasses);
      if (next === signature) return;
      const first = signature === undefined;
      signature = next;
      if (first) return; // the first list: taking over reconciles everything anyway
      this.#log.info({ classes: next }, "storage classes changed; reconciling every sandbox");
      for (const s of c.sandboxes.list()) this.#sandboxes.enqueue(keyOf(s));
    };
    c.storageClasses.on("add", recompute);
    c.storageClasses.on("update", recompute);
    c.storageClasses.on("delete", recompute);
  }

  #serveProbes(): Promise<Server> {
    const server = probeServer({
      unhealthy: () =>
        this.#elector && !this.#elector.healthy() ? "leader lease not renewed" : undefined,
      informers: this.#informers,
      registry,
    });
    return listen(server, this.#cfg.probeAddress);
  }
}
