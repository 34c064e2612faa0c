/**
 * Leader election against a small in-process Lease API (GET, POST, PUT with resourceVersion
 * conflicts) reached through a real Kube client: one leader at a time, takeover only after the
 * lease expired by the standby's own clock, and at once after a clean release.
 */
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Kube } from "../src/kube/client.ts";
import { LeaderElector } from "../src/kube/leader-election.ts";

const NS = "sandpit-system";
const NAME = "sandpit-operator";
const BASE = `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases`;
const LEASE_MS = 1000;
const RETRY_MS = 100;
const RENEW_DEADLINE_MS = 500;

interface LeaseSpec {
  holderIdentity?: string | null;
  leaseDurationSeconds?: number;
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions?: number;
}
interface StoredLease {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace: string; resourceVersion: string };
  spec: LeaseSpec;
}

/** One Lease, with optimistic concurrency on resourceVersion like the API server. */
class FakeLeaseApi {
  lease: StoredLease | undefined;
  #rv = 0;
  conflicts = 0;
  writes: { method: string; holder: string | null | undefined }[] = [];
  /** When set, requests of this method wait for it before they are served. */
  gate: { method: string; arrived: () => void; open: Promise<void> } | undefined;
  /** When set, a PUT is held until a second PUT arrives (or a timeout), so both race on one version. */
  pairPuts = false;
  #heldPut: (() => void) | undefined;
  readonly server = createServer((req, res) => void this.#serve(req, res));

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  /** Another writer takes the lease (a new record every standby sees as fresh). */
  steal(holder: string): void {
    this.lease = {
      ...this.lease!,
      metadata: { ...this.lease!.metadata, resourceVersion: String(++this.#rv) },
      spec: { ...this.lease!.spec, holderIdentity: holder, renewTime: new Date().toISOString() },
    };
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let text = "";
    for await (const chunk of req) text += String(chunk);
    const body = text ? (JSON.parse(text) as StoredLease) : undefined;
    const gate = this.gate;
    if (gate && gate.method === req.method) {
      gate.arrived();
      await gate.open;
    }
    const send = (code: number, value: unknown) => {
      res.writeHead(code, { "content-type": "application/json" });
      res.end(JSON.stringify(value));
    };
    const status = (code: number, reason: string) =>
      send(code, { kind: "Status", apiVersion: "v1", status: "Failure", reason, code });
    const url = new URL(req.url!, "http://x");
    if (req.method === "POST" && url.pathname === BASE) {
      if (this.lease) return status(409, "AlreadyExists");
      this.lease = {
        apiVersion: "coordination.k8s.io/v1",
        kind: "Lease",
        metadata: { name: body!.metadata.name, namespace: NS, resourceVersion: String(++this.#rv) },
        spec: body!.spec,
      };
      this.writes.push({ method: "POST", holder: body!.spec.holderIdentity });
      return send(201, this.lease);
    }
    if (url.pathname !== `${BASE}/${NAME}`) return status(404, "NotFound");
    if (req.method === "GET") return this.lease ? send(200, this.lease) : status(404, "NotFound");
    if (req.method === "PUT") {
      if (this.pairPuts) {
        if (this.#heldPut) {
          this.#heldPut();
          this.#heldPut = undefined;
          await new Promise((resolve) => setImmediate(resolve)); // the held one goes first
        } else {
          await new Promise<void>((resolve) => {
            this.#heldPut = resolve;
            setTimeout(resolve, 2000);
          });
          this.#heldPut = undefined;
        }
      }
      if (!this.lease) return status(404, "NotFound");
      if (body!.metadata.resourceVersion !== this.lease.metadata.resourceVersion) {
        this.conflicts++;
        return status(409, "Conflict");
      }
      this.lease = {
        ...body!,
        metadata: { ...this.lease.metadata, resourceVersion: String(++this.#rv) },
      };
      this.writes.push({ method: "PUT", holder: body!.spec.holderIdentity });
      return send(200, this.lease);
    }
    return status(405, "MethodNotAllowed");
  }
}

const logger = pino({ level: "silent" });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** How long `within` waits for something that must happen: a hang guard, not a speed bound. */
const EVENTUALLY_MS = 15_000;

/** Resolves with the promise's value, or fails the test after `ms`. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
    }),
  ]);
}

let api: FakeLeaseApi;
let kube: Kube;
const electors: LeaderElector[] = [];

function elector(identity: string, o: { leaseDurationMs?: number } = {}): LeaderElector {
  const e = new LeaderElector(kube, {
    namespace: NS,
    name: NAME,
    identity,
    leaseDurationMs: o.leaseDurationMs ?? LEASE_MS,
    renewDeadlineMs: RENEW_DEADLINE_MS,
    retryPeriodMs: RETRY_MS,
    logger,
  });
  electors.push(e);
  return e;
}

beforeEach(async () => {
  api = new FakeLeaseApi();
  const server = await api.start();
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "fake", server, skipTLSVerify: true }],
    users: [{ name: "fake" }],
    contexts: [{ name: "fake", cluster: "fake", user: "fake" }],
    currentContext: "fake",
  });
  kube = new Kube(kc, { fieldManager: "sandpit-operator" });
});

afterEach(async () => {
  await Promise.all(electors.splice(0).map((e) => e.release()));
  await api.stop();
});

describe("LeaderElector", () => {
  it("lets one of two candidates lead while it renews", async () => {
    const a = elector("a");
    const b = elector("b");
    const first = await within(
      Promise.race([a.acquire().then(() => a), b.acquire().then(() => b)]),
      EVENTUALLY_MS,
      "a leader",
    );
    const other = first === a ? b : a;
    expect(first.isLeader).toBe(true);
    expect(api.lease?.spec.holderIdentity).toBe(first.identity);
    const holding = first.holdUntilLost();
    const renewedAt = api.lease!.spec.renewTime;
    // Well past the lease duration: the leader's renewals keep the other one out.
    await sleep(LEASE_MS * 1.8);
    expect(other.isLeader).toBe(false);
    expect(first.isLeader).toBe(true);
    expect(first.healthy()).toBe(true);
    expect(api.lease?.spec.holderIdentity).toBe(first.identity);
    expect(api.lease?.spec.renewTime).not.toBe(renewedAt);
    expect(api.lease?.spec.leaseDurationSeconds).toBe(1);
    expect(api.writes.every((w) => w.holder === first.identity)).toBe(true);
    await first.release();
    expect(await within(holding, EVENTUALLY_MS, "holdUntilLost to end")).toBe("stopped");
  });

  it("takes over from a leader that stopped renewing only after the lease duration", async () => {
    const a = elector("a");
    expect(await within(a.acquire(), EVENTUALLY_MS, "a leads")).toBe(true);
    // a crashed: it never renews. b waits a whole lease duration from when it first saw the record.
    const b = elector("b");
    const started = performance.now();
    expect(await within(b.acquire(), EVENTUALLY_MS, "b takes over")).toBe(true);
    expect(performance.now() - started).toBeGreaterThanOrEqual(LEASE_MS - 5);
    expect(api.lease?.spec).toMatchObject({ holderIdentity: "b", leaseTransitions: 1 });
    // a wakes up: it cannot renew a lease b holds, and gives up after its renew deadline.
    expect(await within(a.holdUntilLost(), EVENTUALLY_MS, "a to notice")).toBe("lost");
    expect(a.isLeader).toBe(false);
    expect(api.lease?.spec.holderIdentity).toBe("b");
  });

  it("lets exactly one standby win when two race for an expired lease (a 409 for the other)", async () => {
    const a = elector("a");
    await within(a.acquire(), EVENTUALLY_MS, "a leads");
    api.pairPuts = true; // both standbys write against the same resourceVersion
    const b = elector("b");
    const c = elector("c");
    const winner = await within(
      Promise.race([b.acquire().then(() => b), c.acquire().then(() => c)]),
      EVENTUALLY_MS,
      "a standby to take over",
    );
    api.pairPuts = false;
    const loser = winner === b ? c : b;
    expect(api.conflicts).toBe(1);
    expect(api.lease?.spec.holderIdentity).toBe(winner.identity);
    const holding = winner.holdUntilLost();
    await sleep(LEASE_MS * 1.5);
    expect(loser.isLeader).toBe(false);
    expect(api.lease?.spec.holderIdentity).toBe(winner.identity);
    await winner.release();
    expect(await holding).toBe("stopped");
  });

  it("hands the lease over at once on release(), long before the lease would expire", async () => {
    // a's lease would outlast the test: only the release can let b in.
    const a = elector("a", { leaseDurationMs: 600_000 });
    await within(a.acquire(), EVENTUALLY_MS, "a leads");
    expect(api.lease?.spec.leaseDurationSeconds).toBe(600);
    const holding = a.holdUntilLost();
    const b = elector("b");
    let bLeads = false;
    const bAcquire = b.acquire().then((v) => (bLeads = v));
    // Several of b's attempts while a holds the lease: none succeeds.
    await sleep(RETRY_MS * 3);
    expect(bLeads).toBe(false);
    await a.release();
    expect(a.isLeader).toBe(false);
    expect(await within(holding, EVENTUALLY_MS, "holdUntilLost to end")).toBe("stopped");
    await within(bAcquire, EVENTUALLY_MS, "b takes over");
    expect(b.isLeader).toBe(true);
    expect(api.lease?.spec).toMatchObject({ holderIdentity: "b", leaseTransitions: 0 });
  });

  it("gives up leadership when another writer holds the lease past the renew deadline", async () => {
    const a = elector("a");
    await within(a.acquire(), EVENTUALLY_MS, "a leads");
    const holding = a.holdUntilLost();
    api.steal("intruder");
    const lostAt = performance.now();
    expect(await within(holding, EVENTUALLY_MS, "a to give up")).toBe("lost");
    expect(performance.now() - lostAt).toBeGreaterThanOrEqual(RENEW_DEADLINE_MS - RETRY_MS);
    expect(a.isLeader).toBe(false);
  });

  it("does not keep a lease it wins after release() was called", async () => {
    let arrived!: () => void;
    const postArrived = new Promise<void>((resolve) => (arrived = resolve));
    let open!: () => void;
    api.gate = { method: "POST", arrived, open: new Promise((resolve) => (open = resolve)) };
    const a = elector("a");
    const acquiring = a.acquire();
    await within(postArrived, EVENTUALLY_MS, "the create request");
    await a.release(); // shutting down while the create is in flight
    api.gate = undefined;
    open();
    expect(await within(acquiring, EVENTUALLY_MS, "acquire to end")).toBe(false);
    expect(a.isLeader).toBe(false);
    // The lease it won is handed back at once, not left to expire.
    expect(api.lease?.spec.holderIdentity ?? null).toBeNull();
  });
});
