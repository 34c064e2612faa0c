/**
 * The operator under failure, on the real cluster: the leader killed with SIGKILL (the standby
 * takes over), the operator killed in the middle of 50 creates (everything converges, nothing
 * orphaned or duplicated), and the API server restarted under load (the informers recover).
 * These tests disturb the whole cluster, so their project runs after every other suite.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type Clients,
  type OperatorProcess,
  childrenOf,
  clients,
  createNamespace,
  deleteNamespace,
  ensureCrds,
  sandboxes,
  startOperator,
  waitFor,
  waitForPhase,
} from "../../cluster/harness.ts";

const run = promisify(execFile);
const UP = new URL("../../cluster/up", import.meta.url).pathname;
let c: Clients;
const namespaces: string[] = [];
const operators: OperatorProcess[] = [];

beforeAll(async () => {
  c = clients(inject("kubeconfig"));
  await ensureCrds(c);
});

afterAll(async () => {
  await Promise.all(operators.map((o) => o.stop()));
  await Promise.all(namespaces.map((n) => deleteNamespace(c, n)));
});

async function namespace(prefix: string): Promise<string> {
  const ns = await createNamespace(c, prefix);
  namespaces.push(ns);
  return ns;
}

async function operator(ns: string, env: Record<string, string> = {}): Promise<OperatorProcess> {
  const o = await startOperator({
    kubeconfig: inject("kubeconfig"),
    namespace: ns,
    image: inject("clusterSandboxImage"),
    env,
  });
  operators.push(o);
  return o;
}

const isLeader = async (o: OperatorProcess) =>
  /leader_election_master_status\{[^}]*\} 1/.test(await o.metrics().catch(() => ""));

/** A short lease so a failover takes seconds; the semantics are the production ones. */
const FAST_LEASE = {
  SANDPIT_LEASE_DURATION_MS: "4000",
  SANDPIT_RENEW_DEADLINE_MS: "3000",
  SANDPIT_RETRY_PERIOD_MS: "500",
};

describe("operator resilience", () => {
  test(
    "two replicas: kill -9 the leader and the other takes over",
    { timeout: 180_000 },
    async () => {
      const ns = await namespace("op-ha");
      const [a, b] = await Promise.all([operator(ns, FAST_LEASE), operator(ns, FAST_LEASE)]);
      const leader = await waitFor("one leader", 30_000, async () => {
        const [la, lb] = await Promise.all([isLeader(a), isLeader(b)]);
        if (la && lb) throw new Error("two leaders at once");
        return la ? a : lb ? b : undefined;
      });
      const standby = leader === a ? b : a;
      expect(await isLeader(standby)).toBe(false);
      await sandboxes.create(c, ns, "before", {});
      await waitForPhase(c, ns, "before", "Ready");

      await leader.kill9();
      await waitFor("the standby to lead", 30_000, () => isLeader(standby), 200);
      const lease = (await c.kc
        .makeApiClient((await import("@kubernetes/client-node")).CoordinationV1Api)
        .readNamespacedLease({ name: "sandpit-operator", namespace: ns })) as {
        spec?: { holderIdentity?: string; leaseTransitions?: number };
      };
      expect(lease.spec?.holderIdentity).toBe(standby.identity);
      expect(lease.spec?.leaseTransitions).toBeGreaterThanOrEqual(1);

      await sandboxes.create(c, ns, "after", {});
      await waitForPhase(c, ns, "after", "Ready");
      // A graceful stop hands the lease back at once (no waiting for expiry).
      const third = await operator(ns, {
        ...FAST_LEASE,
        SANDPIT_LEASE_DURATION_MS: "60000",
        SANDPIT_RENEW_DEADLINE_MS: "40000",
      });
      await standby.stop();
      await waitFor(
        "the third replica to lead after a graceful handover",
        10_000,
        () => isLeader(third),
        200,
      );
    },
  );

  test(
    "kill -9 during 50 creates: after a restart every Sandbox converges with exactly one of each child",
    { timeout: 420_000 },
    async () => {
      const ns = await namespace("op-crash");
      const first = await operator(ns);
      const names = Array.from({ length: 50 }, (_, i) => `c${String(i).padStart(2, "0")}`);
      const creating = Promise.all(names.map((n) => sandboxes.create(c, ns, n, {})));
      // Kill it once it has made some of the children, but well before it is done.
      await waitFor(
        "the first pods",
        60_000,
        async () => {
          const pods = await c.core.listNamespacedPod({
            namespace: ns,
            labelSelector: "app.kubernetes.io/managed-by=sandpit-operator",
          });
          return pods.items.length >= 5;
        },
        50,
      );
      await first.kill9();
      await creating;
      await operator(ns);
      await waitFor(
        "all 50 sandboxes Ready",
        360_000,
        async () => {
          const all = await sandboxes.list(c, ns);
          return all.length === 50 && all.every((s) => s.status?.phase === "Ready");
        },
        1000,
      );

      for (const n of names) {
        const ch = await childrenOf(c, ns, n);
        expect({
          n,
          pods: ch.pods.map((p) => p.metadata?.name),
          claims: ch.claims.length,
          services: ch.services.length,
          secrets: ch.secrets.length,
          policies: ch.policies.length,
        }).toEqual({
          n,
          pods: [n],
          claims: 1,
          services: 0,
          secrets: 1,
          // None of its own: the namespace's shared policies (below) select its pod.
          policies: 0,
        });
      }
      // The namespace's isolation policy and its one egress policy, each made once, whatever
      // the kill interrupted; every pod carries the key the egress policy selects.
      const policies = (await c.net.listNamespacedNetworkPolicy({ namespace: ns })).items;
      expect(policies.map((p) => p.metadata?.name).sort()).toEqual([
        expect.stringMatching(/^sandpit-egress-[0-9a-f]{16}$/),
        "sandpit-isolation",
      ]);
      const key = policies.find((p) => p.metadata?.name?.startsWith("sandpit-egress-"))!.metadata!
        .labels!["sandpit.dev/network"];
      const keyed = await c.core.listNamespacedPod({
        namespace: ns,
        labelSelector: `sandpit.dev/network=${key}`,
      });
      expect(keyed.items.length).toBe(50);
      // Nothing managed that no Sandbox owns.
      const owned = new Set((await sandboxes.list(c, ns)).map((s) => s.metadata.uid));
      const managed = "app.kubernetes.io/managed-by=sandpit-operator";
      const [pods, claims, secrets] = await Promise.all([
        c.core.listNamespacedPod({ namespace: ns, labelSelector: managed }),
        c.core.listNamespacedPersistentVolumeClaim({ namespace: ns, labelSelector: managed }),
        c.core.listNamespacedSecret({ namespace: ns, labelSelector: managed }),
      ]);
      for (const o of [...pods.items, ...claims.items, ...secrets.items]) {
        expect(owned.has(o.metadata?.ownerReferences?.[0]?.uid)).toBe(true);
      }
      expect(pods.items.length).toBe(50);
      await Promise.all(names.map((n) => sandboxes.delete(c, ns, n)));
    },
  );

  test(
    "the API server restarts under load: the informers recover and new Sandboxes still converge",
    { timeout: 300_000 },
    async () => {
      const ns = await namespace("op-api");
      const o = await operator(ns);
      await Promise.all(["a1", "a2", "a3", "a4", "a5"].map((n) => sandboxes.create(c, ns, n, {})));
      const state = dirname(inject("kubeconfig"));
      const pid = Number(readFileSync(join(state, "pids", "kube-apiserver"), "utf8"));
      // SIGKILL: a crash, and no wait for its graceful drain (which holds watches for a minute).
      process.kill(pid, "SIGKILL");
      await waitFor(
        "the API server to stop",
        30_000,
        async () => {
          try {
            process.kill(pid, 0);
            return false;
          } catch {
            return true;
          }
        },
        200,
      );
      await run(UP, [], { timeout: 300_000, maxBuffer: 16 * 1024 * 1024 });
      await Promise.all(
        ["b1", "b2", "b3"].map((n) =>
          waitFor(`create ${n}`, 60_000, () => sandboxes.create(c, ns, n, {}), 1000),
        ),
      );
      for (const n of ["a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3"])
        await waitForPhase(c, ns, n, "Ready", 180_000);
      const metrics = await o.metrics();
      expect(metrics).toMatch(/sandpit_informer_restarts_total\{[^}]*cause="error"[^}]*\} [1-9]/);
    },
  );
});
