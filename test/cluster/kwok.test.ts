/**
 * Fake nodes for scale tests (test/cluster/kwok): pods that tolerate the fake node's taint and
 * select `type: kwok` become Running and Ready without running anything, and `kwok stop` leaves
 * neither nodes nor pods behind. The real node's pods are untouched: the fake nodes are tainted.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";

const run = promisify(execFile);
const KWOK = join(new URL(".", import.meta.url).pathname, "kwok");
const kc = new KubeConfig();
kc.loadFromFile(inject("kubeconfig"));
const core = kc.makeApiClient(CoreV1Api);
const ns = `kwok-${randomBytes(3).toString("hex")}`;
const node = "sandpit-kwok-1";
const PODS = 50;

async function kwok(...args: string[]): Promise<void> {
  // A cold first start builds the kwok binary (minutes on 2 cores).
  await run(KWOK, args, { timeout: 14 * 60_000 });
}

async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined>,
  seconds = 60,
): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  while (Date.now() < deadline) {
    const value = await check().catch(() => undefined);
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${what}: not within ${seconds} s`);
}

function fakePod(name: string): V1Pod {
  return {
    metadata: { name, labels: { app: "kwok-test" } },
    spec: {
      nodeSelector: { type: "kwok" },
      tolerations: [{ key: "kwok.x-k8s.io/node", operator: "Exists", effect: "NoSchedule" }],
      automountServiceAccountToken: false,
      // Never pulled nor run: kwok only writes the pod's status.
      containers: [{ name: "main", image: "sandpit.local/fake:1", imagePullPolicy: "Never" }],
    },
  };
}

function ready(pod: V1Pod): boolean {
  return (
    pod.status?.phase === "Running" &&
    pod.status.conditions?.some((c) => c.type === "Ready" && c.status === "True") === true
  );
}

async function fakeNodes(): Promise<string[]> {
  const nodes = await core.listNode({ labelSelector: "type=kwok" });
  return nodes.items.map((n) => n.metadata!.name!);
}

beforeAll(async () => {
  await kwok("start", "1");
  await core.createNamespace({ body: { metadata: { name: ns } } });
});

afterAll(async () => {
  await core.deleteNamespace({ name: ns }).catch(() => undefined);
  await kwok("stop");
});

describe("kwok fake nodes", () => {
  it("has a Ready fake node, tainted so that only tolerating pods land on it", async () => {
    const n = await core.readNode({ name: node });
    expect(n.metadata?.labels?.type).toBe("kwok");
    expect(n.metadata?.annotations?.["kwok.x-k8s.io/node"]).toBe("fake");
    expect(n.spec?.taints).toContainEqual({
      key: "kwok.x-k8s.io/node",
      value: "fake",
      effect: "NoSchedule",
    });
    expect(n.status?.allocatable?.pods).toBe("2k");
    expect(n.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
  });

  it(`runs ${PODS} pods on it: all Running and Ready, with fake addresses`, async () => {
    await Promise.all(
      Array.from({ length: PODS }, (_, i) =>
        core.createNamespacedPod({ namespace: ns, body: fakePod(`fake-${i}`) }),
      ),
    );
    const pods = await waitFor("all pods Running and Ready", async () => {
      const list = await core.listNamespacedPod({ namespace: ns });
      return list.items.length === PODS && list.items.every(ready) ? list.items : undefined;
    });
    for (const p of pods) {
      expect(p.spec?.nodeName).toBe(node);
      // The node's pod CIDR, 10.244.136.0/21: away from the real node's 10.244.0.0/24.
      expect(p.status?.podIP).toMatch(/^10\.244\.(13[6-9]|14[0-3])\.\d+$/);
    }
    expect(new Set(pods.map((p) => p.status?.podIP)).size).toBe(PODS);
  });

  it("leaves nothing behind: the namespace goes, and stop deletes the fake nodes", async () => {
    await core.deleteNamespace({ name: ns });
    await waitFor(
      "namespace deleted",
      async () => {
        const names = (await core.listNamespace()).items.map((n) => n.metadata?.name);
        return names.includes(ns) ? undefined : true;
      },
      120,
    );
    await kwok("stop");
    expect(await fakeNodes()).toEqual([]);
    const left = await core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${node}` });
    expect(left.items).toEqual([]);
  }, 300_000);
});
