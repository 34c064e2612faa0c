/**
 * The warm fast path (docs/architecture.md, "The warm create"): a provisioner replica holds
 * reserved warm pods and answers a create from one with a single API write; the operator
 * completes ownership later. Every invariant is checked after SIGKILLing the provisioner or the
 * operator at each named step (SANDPIT_FAULT_AT): one sandbox per thread, one sandbox per pod,
 * no reservation left to a dead holder, the pool refilled, the sandbox usable with the token
 * its create answered with.
 */
import { CoordinationV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type Clients,
  type OperatorProcess,
  type ProvisionerProcess,
  clients,
  createNamespace,
  deleteNamespace,
  ensureCrds,
  pools,
  provisionerCall,
  sandboxes,
  startOperator,
  startProvisioner,
  tokenOf,
  waitFor,
  waitForPhase,
} from "../cluster/harness.ts";

const POOL = "fp";
const WARM = 3;
const KEY = "fastpath-key-0123456789abcdef";
const HOLDER = "sandpit.dev/reserved-by";
const RESERVED_POD = "sandpit.dev/reserved-pod";

let c: Clients;
let ns: string;
let operator: OperatorProcess | undefined;
const kubeconfig = () => inject("kubeconfig");
const image = () => inject("clusterSandboxImage");

const provisioner = (env: Record<string, string> = {}) =>
  startProvisioner({
    kubeconfig: kubeconfig(),
    namespace: ns,
    keys: [{ key: KEY, tenant: "fp", maxSandboxes: 100 }],
    env: {
      SANDPIT_DEFAULT_POOL: POOL,
      SANDPIT_WARM_RESERVATION: "1",
      SANDPIT_RESERVATION_LEASE_SECONDS: "4",
      ...env,
    },
  });

const operatorWith = (env: Record<string, string> = {}) =>
  startOperator({ kubeconfig: kubeconfig(), namespace: ns, image: image(), env });

beforeAll(async () => {
  c = clients(kubeconfig());
  await ensureCrds(c);
  ns = await createNamespace(c, "fastpath");
  operator = await operatorWith();
  await pools.create(c, ns, POOL, { warm: WARM, maxActive: 50, template: {} });
  await pools.waitWarm(c, ns, POOL, WARM);
}, 240_000);

afterAll(async () => {
  await operator?.stop();
  if (ns) await deleteNamespace(c, ns);
});

const warmPods = async () =>
  (
    await c.core.listNamespacedPod({
      namespace: ns,
      labelSelector: `sandpit.dev/pool=${POOL},sandpit.dev/warm=true`,
    })
  ).items.filter((p) => !p.metadata?.deletionTimestamp);

const liveHolders = async () => {
  const leases = await c.kc
    .makeApiClient(CoordinationV1Api)
    .listNamespacedLease({ namespace: ns, labelSelector: "sandpit.dev/reservation-holder" });
  const now = Date.now();
  return new Set(
    leases.items
      .filter(
        (l) => new Date(l.spec!.renewTime!).getTime() + l.spec!.leaseDurationSeconds! * 1000 > now,
      )
      .map((l) => l.metadata!.name!),
  );
};

/** Every reservation names a live holder and the pool is full again. */
async function settled(): Promise<void> {
  try {
    await waitFor("reservations only by live holders, the pool refilled", 90_000, async () => {
      const [pods, live] = await Promise.all([warmPods(), liveHolders()]);
      const holders = pods.map((p) => p.metadata?.annotations?.[HOLDER]).filter(Boolean);
      return holders.every((h) => live.has(h!)) && pods.length >= WARM;
    });
  } catch (err) {
    const live = [...(await liveHolders())].join(", ") || "none";
    throw new Error(`${String(err)}\nlive holders: ${live}${await explain()}`, { cause: err });
  }
}

/** The invariants over every Sandbox of the namespace. */
async function invariants(): Promise<void> {
  const list = (await c.custom.listNamespacedCustomObject({
    group: "sandpit.dev",
    version: "v1alpha1",
    namespace: ns,
    plural: "sandboxes",
  })) as {
    items: {
      metadata: {
        name: string;
        labels?: Record<string, string>;
        annotations?: Record<string, string>;
      };
      status?: { podName?: string };
    }[];
  };
  const threads = list.items.map((s) => s.metadata.labels?.["sandpit.dev/thread"]).filter(Boolean);
  expect(new Set(threads).size).toBe(threads.length); // never two sandboxes for one thread
  const pods = list.items.map((s) => s.status?.podName).filter(Boolean);
  expect(new Set(pods).size).toBe(pods.length); // never one pod for two sandboxes
  const reserved = list.items.map((s) => s.metadata.annotations?.[RESERVED_POD]).filter(Boolean);
  expect(new Set(reserved).size, JSON.stringify(reserved)).toBe(reserved.length); // nor named by two
  // A sandbox answered from the pod it was handed lives on that pod, never on another: its
  // caller's first commands and files went to the pod it was handed.
  for (const s of list.items) {
    const handed = s.metadata.annotations?.[RESERVED_POD];
    if (handed && s.status?.podName) expect(s.status.podName, s.metadata.name).toBe(handed);
  }
  const all = (await c.core.listNamespacedPod({ namespace: ns })).items;
  for (const s of list.items) {
    const owned = all.filter((p) =>
      p.metadata?.ownerReferences?.some((o) => o.controller && o.name === s.metadata.name),
    );
    expect(owned.length).toBeLessThanOrEqual(1);
  }
}

/**
 * What a failure message needs to be diagnosed from CI's output alone: every Sandbox with its
 * reservation and status, every pod of the pool with its holder, and the end of both services'
 * logs.
 */
async function explain(prov?: ProvisionerProcess): Promise<string> {
  const list = (await c.custom.listNamespacedCustomObject({
    group: "sandpit.dev",
    version: "v1alpha1",
    namespace: ns,
    plural: "sandboxes",
  })) as { items: { metadata: { name: string; annotations?: object }; status?: object }[] };
  const pods = (await c.core.listNamespacedPod({ namespace: ns })).items.map((p) => ({
    name: p.metadata?.name,
    labels: p.metadata?.labels,
    holder: p.metadata?.annotations?.[HOLDER],
    owner: p.metadata?.ownerReferences?.[0]?.name,
    phase: p.status?.phase,
    ready: p.status?.conditions?.find((x) => x.type === "Ready")?.status,
  }));
  const sbx = list.items.map((s) => ({
    name: s.metadata.name,
    annotations: s.metadata.annotations,
    status: s.status,
  }));
  return [
    `\n--- sandboxes ---\n${JSON.stringify(sbx, null, 1)}`,
    `\n--- pods ---\n${JSON.stringify(pods, null, 1)}`,
    `\n--- provisioner logs (end) ---\n${prov?.logs().slice(-6000) ?? "(stopped)"}`,
    `\n--- operator logs (end) ---\n${operator?.logs().slice(-6000) ?? "(none)"}`,
  ].join("");
}

/** The thread's sandbox as a (new) provisioner hands it out, with a command run through it. */
async function useThread(prov: ProvisionerProcess, thread: string) {
  const made = await provisionerCall(prov.url, "POST", "/v1/sandboxes", KEY, {
    threadId: thread,
    env: { FP_THREAD: thread },
  });
  if (made.status !== 200 && made.status !== 201)
    throw new Error(
      `create of ${thread}: ${made.status} ${JSON.stringify(made.json)}${await explain(prov)}`,
    );
  expect(made.json.phase).toBe("Ready");
  const out = await provisionerCall(
    prov.url,
    "POST",
    `/v1/sandboxes/${made.json.id}/proxy/v1/code/execute`,
    KEY,
    { language: "python", code: "import os; print(os.environ['FP_THREAD'])" },
  );
  expect(out.status).toBe(200);
  expect(out.json.stdout.trim()).toBe(thread);
  return made.json as { id: string; token: string };
}

describe("warm fast path", () => {
  test(
    "a create answers from a reserved pod; the operator then owns it with the same token",
    { timeout: 240_000 },
    async () => {
      const prov = await provisioner();
      try {
        await waitFor("a reserved warm pod", 60_000, async () =>
          (await warmPods()).find((p) => p.metadata?.annotations?.[HOLDER]),
        );
        const answers = await Promise.all(
          Array.from({ length: 10 }, () =>
            provisionerCall(prov.url, "POST", "/v1/sandboxes", KEY, {
              threadId: "t-fast",
              env: { FP_THREAD: "t-fast" },
            }),
          ),
        );
        expect(new Set(answers.map((a) => a.json.id)).size).toBe(1);
        expect(answers.every((a) => a.json.phase === "Ready")).toBe(true);
        const { id, token } = await useThread(prov, "t-fast");
        const sbx = (await sandboxes.get(c, ns, id)) as unknown as {
          metadata: { annotations?: Record<string, string> };
        };
        const reserved = sbx.metadata.annotations?.[RESERVED_POD];
        expect(reserved).toBeTruthy();
        const ready = await waitForPhase(c, ns, id, "Ready");
        expect(ready.status?.podName).toBe(reserved);
        expect(await tokenOf(c, ns, id)).toBe(token);
        const pod = await c.core.readNamespacedPod({ name: reserved!, namespace: ns });
        expect(pod.metadata?.labels?.["sandpit.dev/warm"]).toBeUndefined();
        expect(pod.metadata?.ownerReferences?.[0]?.name).toBe(id);
        await invariants();
      } finally {
        await prov.stop();
      }
      await settled();
    },
  );

  test(
    "a burst larger than the reservation: every create answers, each on a pod of its own",
    { timeout: 300_000 },
    async () => {
      const prov = await provisioner();
      try {
        const made = await Promise.all(
          Array.from({ length: WARM + 2 }, (_, i) => useThread(prov, `burst-${i}`)),
        );
        expect(new Set(made.map((m) => m.id)).size).toBe(WARM + 2);
        for (const m of made) await waitForPhase(c, ns, m.id, "Ready", 180_000);
        await invariants();
      } finally {
        await prov.stop();
      }
      await settled();
    },
  );

  test(
    "a create whose answer is lost after its Sandbox was written: its pod goes to no other sandbox",
    { timeout: 300_000 },
    async () => {
      // The Sandbox (naming its reserved pod) is written, then the answer is lost on its way
      // back: the provisioner cannot tell whether it was written. The pod once went back to the
      // reservation, and the next create was handed the same pod.
      const prov = await provisioner({ SANDPIT_FAULT_FAIL: "provisioner-create-answer-lost=1" });
      try {
        await waitFor("a reserved warm pod", 60_000, async () =>
          (await warmPods()).find((p) => p.metadata?.annotations?.[HOLDER]),
        );
        const lost = await provisionerCall(prov.url, "POST", "/v1/sandboxes", KEY, {
          threadId: "t-lost",
          env: { FP_THREAD: "t-lost" },
        });
        expect(lost.status, JSON.stringify(lost.json)).toBeGreaterThanOrEqual(500);
        // The caller tries again, and other creates follow at once.
        const made = await Promise.all([
          useThread(prov, "t-lost"),
          ...Array.from({ length: WARM }, (_, i) => useThread(prov, `after-lost-${i}`)),
        ]);
        expect(new Set(made.map((m) => m.id)).size).toBe(WARM + 1);
        for (const m of made) await waitForPhase(c, ns, m.id, "Ready", 180_000);
        await invariants();
      } finally {
        await prov.stop();
      }
      await settled();
    },
  );

  test(
    "the operator initialises the reserved pod before the provisioner does: the create still answers Ready",
    { timeout: 240_000 },
    async () => {
      // The provisioner stalls between writing the Sandbox and initialising its pod, so the
      // operator adopts the pod and reports the sandbox Ready first: the order that once left
      // a create waiting for an event that had already come, until its 120 s ran out.
      const prov = await provisioner({ SANDPIT_FAULT_STALL: "provisioner-sandbox-created=10000" });
      try {
        await waitFor("a reserved warm pod", 60_000, async () =>
          (await warmPods()).find((p) => p.metadata?.annotations?.[HOLDER]),
        );
        const { id, token } = await useThread(prov, "t-late");
        expect(prov.logs()).toContain("the operator initialised the reserved warm pod first");
        expect(await tokenOf(c, ns, id)).toBe(token);
        await invariants();
      } finally {
        await prov.stop();
      }
      await settled();
    },
  );

  for (const step of [
    "provisioner-reserved",
    "provisioner-sandbox-created",
    "provisioner-initialised",
  ]) {
    test(`SIGKILL of the provisioner at ${step}`, { timeout: 300_000 }, async () => {
      const thread = `kill-${step}`;
      // Dying while reserving can happen before it answers its readiness probe.
      const doomed = await provisioner({ SANDPIT_FAULT_AT: step }).catch(() => undefined);
      if (doomed && step !== "provisioner-reserved") {
        await waitFor("a reserved warm pod", 60_000, async () =>
          (await warmPods()).find((p) => p.metadata?.annotations?.[HOLDER]),
        );
        await provisionerCall(doomed.url, "POST", "/v1/sandboxes", KEY, {
          threadId: thread,
          env: { FP_THREAD: thread },
        }).catch(() => undefined); // the connection dies with the process
      }
      await doomed?.kill9();
      const prov = await provisioner();
      try {
        const { id, token } = await useThread(prov, thread);
        await waitForPhase(c, ns, id, "Ready", 120_000);
        expect(await tokenOf(c, ns, id)).toBe(token);
        await invariants();
      } finally {
        await prov.stop();
      }
      await settled();
    });
  }

  for (const step of ["operator-adopt-claimed", "operator-adopt-initialised"]) {
    test(`SIGKILL of the operator at ${step}`, { timeout: 300_000 }, async () => {
      const thread = `kill-${step}`;
      await operator?.stop();
      operator = await operatorWith({ SANDPIT_FAULT_AT: step });
      const prov = await provisioner();
      try {
        await waitFor("a reserved warm pod", 60_000, async () =>
          (await warmPods()).find((p) => p.metadata?.annotations?.[HOLDER]),
        );
        // The answer does not wait for the operator, which dies adopting the pod.
        const first = await useThread(prov, thread);
        await waitFor(
          "the operator's crash",
          60_000,
          async () => operator!.proc.exitCode !== null || operator!.proc.signalCode !== null,
        );
        operator = await operatorWith();
        await waitForPhase(c, ns, first.id, "Ready", 120_000);
        expect(await tokenOf(c, ns, first.id)).toBe(first.token);
        const again = await useThread(prov, thread);
        expect(again.id).toBe(first.id);
        await invariants();
      } finally {
        await prov.stop();
      }
      await settled();
    });
  }
});
