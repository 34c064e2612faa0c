/**
 * SandboxPools on the real cluster: the maxActive cap under LRU and Reject, warm adoption with
 * the new sandbox's own token and environment, a template change that replaces warm pods
 * without the pool ever running out of claimable ones, and a member deleted and at once created
 * again under its name, which must not take its predecessor's pod or volume.
 */
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import { dataClaimName } from "@sandpit/operator/api";
import {
  type Clients,
  type OperatorProcess,
  clients,
  createNamespace,
  deleteNamespace,
  ensureCrds,
  pools,
  runCode,
  sandboxes,
  startOperator,
  tokenOf,
  waitFor,
  waitForPhase,
  warmTokenOfPod,
} from "../cluster/harness.ts";

let c: Clients;
let ns: string;
let operator: OperatorProcess;

beforeAll(async () => {
  c = clients(inject("kubeconfig"));
  await ensureCrds(c);
  ns = await createNamespace(c, "op-pool");
  operator = await startOperator({
    kubeconfig: inject("kubeconfig"),
    namespace: ns,
    image: inject("clusterSandboxImage"),
  });
});

afterAll(async () => {
  await operator?.stop();
  if (ns) await deleteNamespace(c, ns);
});

const readyOnes = async (prefix: string) =>
  (await sandboxes.list(c, ns))
    .filter((s) => s.metadata.name.startsWith(prefix) && s.status?.phase === "Ready")
    .map((s) => s.metadata.name)
    .sort();

describe("SandboxPool", () => {
  test(
    "LRU: with maxActive 3 and five sandboxes, the three most recently active stay Ready",
    { timeout: 180_000 },
    async () => {
      await pools.create(c, ns, "lru", { maxActive: 3, template: {} });
      for (const n of ["l1", "l2", "l3"]) {
        await sandboxes.create(c, ns, n, { poolRef: "lru" });
        await waitForPhase(c, ns, n, "Ready");
      }
      // l1 is used again, so l2 is now the least recently active.
      await sandboxes.reportActivity(c, ns, "l1");
      await waitFor(
        "l1's activity to be seen",
        10_000,
        async () => (await sandboxes.get(c, ns, "l1")).status?.lastActivityTime,
      );
      await sandboxes.create(c, ns, "l4", { poolRef: "lru" });
      await waitForPhase(c, ns, "l4", "Ready");
      const l2 = await waitForPhase(c, ns, "l2", "Suspended");
      expect(l2.status?.conditions?.find((x) => x.type === "Evicted")?.status).toBe("True");
      await sandboxes.create(c, ns, "l5", { poolRef: "lru" });
      await waitForPhase(c, ns, "l5", "Ready");
      await waitForPhase(c, ns, "l3", "Suspended");
      expect(await readyOnes("l")).toEqual(["l1", "l4", "l5"]);
      const pool = await waitFor("pool status", 10_000, async () => {
        const p = await pools.get(c, ns, "lru");
        return p.status?.active === 3 && p.status.evictions === 2 ? p : undefined;
      });
      expect(pool.status?.active).toBe(3);

      // An evicted sandbox is resumable: activity brings it back and evicts the next LRU one (l1).
      await sandboxes.reportActivity(c, ns, "l2");
      await waitForPhase(c, ns, "l2", "Ready");
      await waitForPhase(c, ns, "l1", "Suspended");
      expect(await readyOnes("l")).toEqual(["l2", "l4", "l5"]);
    },
  );

  test(
    "Reject: at maxActive a new sandbox waits with CapacityExceeded, and starts when a slot frees",
    { timeout: 120_000 },
    async () => {
      await pools.create(c, ns, "strict", { maxActive: 1, evictionPolicy: "Reject", template: {} });
      await sandboxes.create(c, ns, "r1", { poolRef: "strict" });
      await waitForPhase(c, ns, "r1", "Ready");
      await sandboxes.create(c, ns, "r2", { poolRef: "strict" });
      const waiting = await waitFor("r2 to report CapacityExceeded", 30_000, async () => {
        const s = await sandboxes.get(c, ns, "r2");
        return s.status?.conditions?.find(
          (x) => x.type === "CapacityExceeded" && x.status === "True",
        )
          ? s
          : undefined;
      });
      expect(waiting.status?.phase).toBe("Pending");
      expect(
        waiting.status?.conditions?.find((x) => x.type === "CapacityExceeded")?.message,
      ).toMatch(/maxActive of 1/);
      expect((await sandboxes.get(c, ns, "r1")).status?.phase).toBe("Ready");
      await sandboxes.delete(c, ns, "r1");
      await waitForPhase(c, ns, "r2", "Ready");
    },
  );

  test(
    "warm: a new sandbox adopts a warm pod without a cold start, with its own token and env",
    { timeout: 180_000 },
    async () => {
      await pools.create(c, ns, "hot", {
        maxActive: 5,
        warm: 2,
        template: { env: [{ name: "FROM", value: "template" }] },
      });
      await waitFor(
        "two warm pods ready",
        90_000,
        async () => (await pools.get(c, ns, "hot")).status?.warmReady === 2,
      );
      const warm = await c.core.listNamespacedPod({
        namespace: ns,
        labelSelector: "sandpit.dev/pool=hot,sandpit.dev/warm=true",
      });
      const warmNames = warm.items.map((p) => p.metadata!.name!);

      await sandboxes.create(c, ns, "w1", {
        poolRef: "hot",
        env: [{ name: "OWN", value: "mine" }],
      });
      const w1 = await waitForPhase(c, ns, "w1", "Ready", 30_000);
      expect(warmNames).toContain(w1.status?.podName);
      const pod = await c.core.readNamespacedPod({ name: w1.status!.podName!, namespace: ns });
      expect(pod.metadata?.labels?.["sandpit.dev/warm"]).toBeUndefined();
      expect(pod.metadata?.ownerReferences?.[0]?.name).toBe("w1");
      expect(pod.status?.containerStatuses?.[0]?.restartCount).toBe(0); // not restarted: adopted

      const token = await tokenOf(c, ns, "w1");
      const out = await runCode(
        w1.status!.endpoint!,
        token,
        "import os; print(os.environ['OWN'], os.environ['FROM'])",
      );
      expect(out.stdout).toBe("mine template\n");
      // The warm token it was made with no longer opens it.
      const warmToken = await warmTokenOfPod(c, ns, pod);
      await expect(runCode(w1.status!.endpoint!, warmToken, "print(1)")).rejects.toThrow(/401/);
      // Its volume moved with it.
      const claim = await c.core.readNamespacedPersistentVolumeClaim({
        name: dataClaimName(w1.status!.podName!),
        namespace: ns,
      });
      expect(claim.metadata?.ownerReferences?.[0]?.name).toBe("w1");
      // The pool refills.
      await waitFor(
        "the pool to be refilled",
        90_000,
        async () => (await pools.get(c, ns, "hot")).status?.warmReady === 2,
      );
    },
  );

  test(
    "a template change replaces warm pods without draining the pool",
    { timeout: 240_000 },
    async () => {
      await pools.create(c, ns, "roll", {
        maxActive: 5,
        warm: 2,
        template: { env: [{ name: "V", value: "1" }] },
      });
      await waitFor(
        "two warm pods ready",
        90_000,
        async () => (await pools.get(c, ns, "roll")).status?.warmReady === 2,
      );
      const before = new Set(
        (
          await c.core.listNamespacedPod({
            namespace: ns,
            labelSelector: "sandpit.dev/pool=roll,sandpit.dev/warm=true",
          })
        ).items.map((p) => p.metadata!.uid),
      );
      await pools.patchSpec(c, ns, "roll", { template: { env: [{ name: "V", value: "2" }] } });
      let minReady = Infinity;
      await waitFor(
        "every warm pod replaced",
        180_000,
        async () => {
          const pods = await c.core.listNamespacedPod({
            namespace: ns,
            labelSelector: "sandpit.dev/pool=roll,sandpit.dev/warm=true",
          });
          const live = pods.items.filter((p) => !p.metadata?.deletionTimestamp);
          const ready = live.filter((p) =>
            p.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True"),
          );
          minReady = Math.min(minReady, ready.length);
          return (
            live.length === 2 &&
            ready.length === 2 &&
            live.every((p) => !before.has(p.metadata!.uid))
          );
        },
        200,
      );
      expect(minReady).toBeGreaterThanOrEqual(1);
      // A sandbox adopted now sees the new template.
      await sandboxes.create(c, ns, "v2", { poolRef: "roll" });
      const v2 = await waitForPhase(c, ns, "v2", "Ready", 30_000);
      expect(
        (
          await runCode(
            v2.status!.endpoint!,
            await tokenOf(c, ns, "v2"),
            "import os; print(os.environ['V'])",
          )
        ).stdout,
      ).toBe("2\n");
    },
  );

  test(
    "a member suspended, resumed, deleted and at once created again is Ready on its own pod and volume",
    { timeout: 300_000 },
    async () => {
      await pools.create(c, ns, "again", { maxActive: 3, warm: 1, template: {} });
      const oneWarm = () =>
        waitFor(
          "a warm pod ready",
          90_000,
          async () => (await pools.get(c, ns, "again")).status?.warmReady === 1,
        );
      await oneWarm();
      await sandboxes.create(c, ns, "re", { poolRef: "again" });
      await waitForPhase(c, ns, "re", "Ready", 30_000);
      await sandboxes.patchSpec(c, ns, "re", { lifecycle: { suspended: true } });
      await waitForPhase(c, ns, "re", "Suspended");
      await sandboxes.patchSpec(c, ns, "re", { lifecycle: { suspended: false } });
      const resumed = await waitForPhase(c, ns, "re", "Ready");
      await oneWarm(); // the pool refilled after the first adoption

      const since = Date.now() - 1_000; // event timestamps have whole seconds
      await sandboxes.delete(c, ns, "re");
      const created = await sandboxes.create(c, ns, "re", { poolRef: "again" });
      // The bound of a fresh create: the predecessor's terminating pod costs it nothing.
      const ready = await waitForPhase(c, ns, "re", "Ready");
      const uid = created.metadata.uid!;
      expect(ready.metadata.uid).toBe(uid);
      expect(ready.status?.podName).not.toBe(resumed.status?.podName);
      const pod = await c.core.readNamespacedPod({ name: ready.status!.podName!, namespace: ns });
      expect(pod.metadata?.ownerReferences?.map((o) => o.uid)).toEqual([uid]);
      const claim = await c.core.readNamespacedPersistentVolumeClaim({
        name: dataClaimName(ready.status!.podName!),
        namespace: ns,
      });
      expect(claim.metadata?.ownerReferences?.map((o) => o.uid)).toEqual([uid]);
      // Its own token opens it (not the deleted one's).
      const out = await runCode(ready.status!.endpoint!, await tokenOf(c, ns, "re"), "print(7)");
      expect(out.stdout).toBe("7\n");
      // The bug's own symptom: a pod scheduled onto the deleted predecessor's claim. (A pod
      // waiting for its new claim to bind, such as the pool's refill, is another, normal
      // "unbound immediate PersistentVolumeClaims" warning.)
      const events = await c.core.listNamespacedEvent({ namespace: ns });
      const notFound = events.items.filter((e) => {
        const at = e.lastTimestamp ?? e.eventTime ?? e.metadata?.creationTimestamp;
        return (
          e.type === "Warning" &&
          /persistentvolumeclaim "[^"]+" not found/.test(e.message ?? "") &&
          (at ? new Date(at).getTime() >= since : true)
        );
      });
      expect(notFound.map((e) => e.message)).toEqual([]);
    },
  );
});
