/**
 * The informer caches keep only what kube/transforms.ts lets through. These tests reconcile the
 * same sandboxes twice, once from caches holding the objects as the API server sends them and
 * once from caches holding their transformed versions, and require the same writes, events and
 * status: a field a reconciler reads but the transform drops makes the two differ.
 */
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, test, vi } from "vitest";
import { LABEL } from "../src/api/labels.ts";
import { dataClaimName, tokenSecretName } from "../src/api/names.ts";
import { TOKEN_KEY_SECRET } from "../src/api/reservations.ts";
import type { Sandbox, SandboxPool } from "../src/api/v1alpha1.ts";
import { readConfig } from "../src/config.ts";
import { type Caches, type Ctx, Expectations } from "../src/context.ts";
import type { Informer } from "../src/kube/informer.ts";
import type { EndpointSlice, Node, Pod, StorageClass } from "../src/kube/resources.ts";
import type { KObject } from "../src/kube/rest.ts";
import * as transforms from "../src/kube/transforms.ts";
import { claimable } from "../src/pool/warm.ts";
import type { PoolMembership } from "../src/sandbox/membership.ts";
import { reconcileSandbox } from "../src/sandbox/reconciler.ts";
import { PROGRESS_EVERY_MS } from "../src/sandbox/status.ts";
import { dataClaim, newToken, pod as podManifest, tokenSecret } from "../src/workload/manifests.ts";
import { egressPolicy, isolationPolicy, networkKey } from "../src/workload/network.ts";
import { effectiveSpec } from "../src/workload/spec.ts";
import {
  clusterAddressExceptions,
  nodeAddresses,
  sliceAddresses,
  sliceEndpoint,
} from "../src/workload/egress.ts";
import { FakeInformer, recordingKube } from "./fake-ctx.ts";

const NS = "t";
const cfg = readConfig({});
const NOW = Date.parse("2026-01-01T12:00:00Z");

/** A node with a public address and the API server's slice, as served; and what they exclude. */
const NODE = served<Node>(
  { apiVersion: "v1", kind: "Node", metadata: { name: "n1" } },
  {
    spec: { podCIDR: "10.244.0.0/24", taints: [] },
    status: {
      addresses: [
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "ExternalIP", address: "203.0.113.9" },
        { type: "Hostname", address: "n1" },
      ],
      capacity: { cpu: "4" },
      images: [{ names: ["x"], sizeBytes: 1 }],
      conditions: [{ type: "Ready", status: "True" }],
    },
  },
);
const SLICE = served<EndpointSlice>(
  {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: { name: "kubernetes", namespace: "default" },
  },
  {
    addressType: "IPv4",
    endpoints: [{ addresses: ["198.51.100.4"], conditions: { ready: true } }],
    ports: [{ name: "https", port: 6443, protocol: "TCP" }],
  },
);
const CLUSTER = [...nodeAddresses(NODE), ...sliceAddresses(SLICE)];
/** The default class, trusted to enforce sizes, and another that is not, as served. */
const CLASSES = [
  served<StorageClass>(
    {
      apiVersion: "storage.k8s.io/v1",
      kind: "StorageClass",
      metadata: {
        name: "standard",
        annotations: {
          "storageclass.kubernetes.io/is-default-class": "true",
          "sandpit.dev/enforces-capacity": "true",
        },
      },
    },
    { provisioner: "example.com/csi", reclaimPolicy: "Delete", parameters: { type: "ssd" } },
  ),
  served<StorageClass>(
    { apiVersion: "storage.k8s.io/v1", kind: "StorageClass", metadata: { name: "local-path" } },
    { provisioner: "rancher.io/local-path", volumeBindingMode: "WaitForFirstConsumer" },
  ),
];

/** What the API server adds to every object: the noise the transforms drop. */
function served<T extends KObject>(o: KObject, extra: Record<string, unknown> = {}): T {
  return {
    ...o,
    ...extra,
    metadata: {
      ...o.metadata,
      uid: o.metadata.uid ?? crypto.randomUUID(),
      resourceVersion: "100",
      creationTimestamp: new Date(NOW - 60_000).toISOString(),
      annotations: {
        ...o.metadata.annotations,
        "kubectl.kubernetes.io/last-applied-configuration": JSON.stringify(o),
      },
      managedFields: [{ manager: "sandpit-operator", operation: "Apply", fieldsV1: { f: {} } }],
    },
  } as unknown as T;
}

function sandbox(name: string, spec: Sandbox["spec"] = {}, status?: Sandbox["status"]): Sandbox {
  return served<Sandbox>({
    apiVersion: "sandpit.dev/v1alpha1",
    kind: "Sandbox",
    metadata: { name, namespace: NS, generation: 1, uid: `uid-${name}` },
    spec,
    ...(status ? { status } : {}),
  });
}

/** The children a cold sandbox has once they are all made, as served. */
function children(sbx: Sandbox, podStatus: Pod["status"], podExtra: Partial<Pod["metadata"]> = {}) {
  const eff = effectiveSpec(sbx.spec, undefined, cfg);
  const name = sbx.metadata.name;
  const m = (n: string) => ({
    name: n,
    namespace: NS,
    owner: sbx,
    labels: { [LABEL.sandbox]: name, [LABEL.network]: networkKey(eff.network, cfg) },
  });
  const pod = served<Pod>(
    podManifest(
      m(name),
      eff,
      {
        token: { secret: tokenSecretName(name) },
        mounts: [{ claimName: dataClaimName(name), mountPath: "/mnt/user-data", readOnly: false }],
      },
      cfg,
    ),
    { status: { hostIP: "10.0.0.1", qosClass: "Burstable", startTime: "x", ...podStatus } },
  );
  Object.assign(pod.metadata, podExtra);
  return {
    pods: [pod],
    secrets: [served(tokenSecret(m(tokenSecretName(name)), newToken()))],
    networkPolicies: [
      served(isolationPolicy(NS, cfg)),
      served(egressPolicy(NS, eff.network, cfg, clusterAddressExceptions(CLUSTER))!),
    ],
    claims: [
      served(dataClaim(m(dataClaimName(name)), eff), {
        // The API server fills in the default class and the volume.
        spec: {
          ...(dataClaim(m(dataClaimName(name)), eff).spec as object),
          storageClassName: "standard",
          volumeName: `pvc-${name}`,
        },
        status: { phase: "Bound", capacity: { storage: "1Gi" }, accessModes: ["ReadWriteOnce"] },
      }),
    ],
  };
}

type Objects = { [K in keyof Caches]?: KObject[] };

const noPool: PoolMembership = {
  admit: () => true,
  release: () => undefined,
  evicting: () => false,
  adoptedPod: () => undefined,
  adopt: () => Promise.resolve(undefined),
  podTokens: () => Promise.resolve([]),
};

/** Reconciles `sbx` from caches holding `objects` (transformed or not); what it wrote and said. */
async function reconcileFrom(
  sbx: Sandbox,
  objects: Objects,
  transformed: boolean,
  progressShownRecently = false,
) {
  const writes: unknown[] = [];
  const t = <T extends KObject>(list: KObject[] | undefined, f: transforms.Transform<T>) =>
    new FakeInformer(
      (list ?? []).map((o) => (transformed ? f(structuredClone(o) as T) : o)),
    ) as unknown as Informer<T>;
  // A new token is random each time: only that one was minted counts.
  const kube = recordingKube((w) => {
    writes.push(
      JSON.parse(JSON.stringify(w).replace(/"token(-sha256)?":"[^"]*"/g, '"token$1":"…"')),
    );
    return { metadata: { name: "x" } };
  });
  const ctx: Ctx = {
    kube,
    cfg,
    log: pino({ level: "silent" }),
    events: {
      record: (o: KObject, ...rest: unknown[]) => writes.push(["event", o.metadata.name, ...rest]),
    } as unknown as Ctx["events"],
    caches: {
      sandboxes: t<Sandbox>([sbx], transforms.specAndStatus),
      pools: t<SandboxPool>(objects.pools, transforms.specAndStatus),
      pods: t(objects.pods, transforms.pod),
      claims: t(objects.claims, transforms.claim),
      secrets: t(objects.secrets, transforms.secret),
      networkPolicies: t(objects.networkPolicies, transforms.metadataOnly),
      nodes: t<Node>(objects.nodes ?? [NODE], transforms.node),
      apiServerEndpoints: t<EndpointSlice>(
        objects.apiServerEndpoints ?? [SLICE],
        transforms.endpointSlice,
      ),
      storageClasses: t<StorageClass>(objects.storageClasses ?? CLASSES, transforms.storageClass),
    },
    podExpectations: new Expectations(),
    writeExpectations: new Expectations(),
    progressShown: new Expectations(),
    clusterAddresses: () =>
      clusterAddressExceptions([
        ...ctx.caches.nodes.list().flatMap(nodeAddresses),
        ...ctx.caches.apiServerEndpoints.list().flatMap(sliceAddresses),
      ]),
    policyProbe: () => ctx.caches.apiServerEndpoints.list().map(sliceEndpoint).find(Boolean),
    enqueueSandbox: () => undefined,
    enqueuePool: () => undefined,
  };
  if (progressShownRecently) ctx.progressShown.expect(sbx.metadata.uid!);
  const result = await reconcileSandbox(
    ctx,
    noPool,
    `${NS}/${sbx.metadata.name}`,
    new AbortController().signal,
  );
  return { result, writes };
}

async function same(sbx: Sandbox, objects: Objects) {
  const full = await reconcileFrom(sbx, objects, false);
  const slim = await reconcileFrom(sbx, objects, true);
  expect(slim).toEqual(full);
  return full;
}

beforeEach(() => {
  vi.useFakeTimers({ now: NOW, toFake: ["Date"] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe("a reconcile from transformed caches", () => {
  test("makes the same children as from full objects (none exist yet)", async () => {
    const sbx = sandbox("fresh");
    const { writes } = await same(sbx, {});
    expect(writes.map((w) => (w as string[]).slice(0, 2))).toEqual(
      expect.arrayContaining([
        ["create", "secrets"],
        ["apply", "networkpolicies"],
        ["create", "persistentvolumeclaims"],
      ]),
    );
  });

  test("writes nothing for children that exist (token, policy hash, bound claim read)", async () => {
    const sbx = sandbox("made", {}, { phase: "Starting", podName: "made", startedAt: "x" });
    const objects = children(sbx, {
      phase: "Pending",
      conditions: [{ type: "PodScheduled", status: "True" }],
      containerStatuses: [
        {
          name: "sandboxd",
          image: "i",
          imageID: "",
          restartCount: 0,
          ready: false,
          state: { waiting: { reason: "ContainerCreating" } },
        },
      ] as never,
    });
    const { writes } = await same(sbx, objects);
    expect(
      writes.filter((w) => (w as string[])[0] !== "apply" || (w as string[])[1] !== "sandboxes"),
    ).toEqual([]);
  });

  test("rewrites the policy once when the cluster's addresses change, from the nodes' and slices' cached fields", async () => {
    const sbx = sandbox("moved", {}, { phase: "Starting", podName: "moved", startedAt: "x" });
    const objects = children(sbx, { phase: "Pending" });
    const policyWrites = (w: unknown[]) =>
      w.filter((x) => (x as string[])[0] === "apply" && (x as string[])[1] === "networkpolicies");
    // The same addresses: nothing to write.
    expect(policyWrites((await same(sbx, objects)).writes)).toEqual([]);
    // The API server moved to another public address: one apply, excluding it.
    const moved = structuredClone(SLICE) as EndpointSlice;
    moved.endpoints![0]!.addresses = ["198.51.100.77"];
    const { writes } = await same(sbx, { ...objects, apiServerEndpoints: [moved] });
    expect(policyWrites(writes)).toHaveLength(1);
    const except = JSON.stringify(policyWrites(writes)[0]);
    expect(except).toContain('"198.51.100.77/32"');
    expect(except).toContain('"203.0.113.9/32"');
    expect(except).not.toContain("10.0.0.5/32");
  });

  test("reads the claim's class and the classes' annotations for DiskEnforced", async () => {
    const sbx = sandbox("disk", {}, { phase: "Starting", podName: "disk", startedAt: "x" });
    const objects = children(sbx, { phase: "Pending" });
    const status = (w: unknown[]) =>
      JSON.stringify(
        w.filter((x) => (x as string[])[0] === "apply" && (x as string[])[1] === "sandboxes"),
      );
    expect(status((await same(sbx, objects)).writes)).toContain(
      '"type":"DiskEnforced","status":"True","reason":"StorageClassEnforces"',
    );
    const claims = objects.claims.map((c) => ({
      ...c,
      spec: { ...(c as unknown as { spec: object }).spec, storageClassName: "local-path" },
    }));
    const { writes } = await same(sbx, { ...objects, claims });
    expect(status(writes)).toContain(
      '"type":"DiskEnforced","status":"False","reason":"StorageClassDoesNotEnforce"',
    );
    expect(status(writes)).toContain("(provisioner rancher.io/local-path)");
  });

  test("keeps a node's InternalIP and ExternalIP and a slice's addresses and ports, nothing else", () => {
    expect(transforms.node(structuredClone(NODE))).toEqual({
      apiVersion: "v1",
      kind: "Node",
      metadata: { name: "n1", uid: NODE.metadata.uid, resourceVersion: "100" },
      status: {
        addresses: [
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "ExternalIP", address: "203.0.113.9" },
        ],
      },
    });
    expect(transforms.endpointSlice(structuredClone(SLICE))).toEqual({
      apiVersion: "discovery.k8s.io/v1",
      kind: "EndpointSlice",
      metadata: {
        name: "kubernetes",
        namespace: "default",
        uid: SLICE.metadata.uid,
        resourceVersion: "100",
      },
      endpoints: [{ addresses: ["198.51.100.4"] }],
      ports: [{ port: 6443 }],
    });
    expect(sliceEndpoint(transforms.endpointSlice(structuredClone(SLICE)))).toBe(
      "198.51.100.4:6443",
    );
  });

  test("explains an unschedulable pod and a missing claim from its conditions", async () => {
    const sbx = sandbox("pending", {}, { phase: "Pending", podName: "pending" });
    const { writes } = await same(
      sbx,
      children(sbx, {
        phase: "Pending",
        conditions: [
          {
            type: "PodScheduled",
            status: "False",
            reason: "Unschedulable",
            message: 'persistentvolumeclaim "shared" not found',
          },
        ],
      }),
    );
    expect(JSON.stringify(writes)).toContain("ClaimNotFound");
  });

  test("gives up on a crash-looping sandboxd, with its last exit from lastState", async () => {
    const sbx = sandbox("crash", {}, { phase: "Starting", podName: "crash", startedAt: "x" });
    const { writes } = await same(
      sbx,
      children(sbx, {
        phase: "Running",
        podIP: "10.9.9.9",
        containerStatuses: [
          {
            restartCount: cfg.maxRecreations + 1,
            ready: false,
            state: { waiting: { reason: "CrashLoopBackOff", message: "back-off" } },
            lastState: { terminated: { reason: "Error", exitCode: 3 } },
          },
        ],
      }),
    );
    expect(JSON.stringify(writes)).toContain("exit code 3");
  });

  test("recreates a failed pod by its uid, and waits on a terminating one", async () => {
    const failed = sandbox("failed", {}, { phase: "Starting", podName: "failed", startedAt: "x" });
    const f = await same(
      failed,
      children(failed, { phase: "Failed", reason: "Evicted", message: "disk" }),
    );
    expect(JSON.stringify(f.writes)).toContain('"uid":"');
    const going = sandbox("going", {}, { phase: "Starting", podName: "going", startedAt: "x" });
    const g = await same(
      going,
      children(going, { phase: "Running" }, { deletionTimestamp: new Date(NOW).toISOString() }),
    );
    expect(JSON.stringify(g.writes)).toContain("PodTerminating");
  });

  test("says why a pod died, in the kubelet's words, on the Sandbox and in an Event", async () => {
    // Every lastFailure written, wherever in a write it sits.
    const lastFailureOf = (writes: unknown[]): unknown[] => {
      const found: unknown[] = [];
      const walk = (v: unknown): void => {
        if (Array.isArray(v)) v.forEach(walk);
        else if (v && typeof v === "object") {
          for (const [k, x] of Object.entries(v)) {
            if (k === "lastFailure") found.push(x);
            else walk(x);
          }
        }
      };
      walk(writes);
      return found;
    };
    const evicted = sandbox("evicted", {}, { phase: "Ready", podName: "evicted", startedAt: "x" });
    const kubelet = 'Usage of EmptyDir volume "tmp" exceeds the limit "512Mi". ';
    const e = await same(
      evicted,
      children(evicted, { phase: "Failed", reason: "Evicted", message: kubelet }),
    );
    expect(lastFailureOf(e.writes)).toEqual([
      expect.objectContaining({ reason: "Evicted", message: kubelet, restarts: 0 }),
    ]);
    expect(e.writes).toContainEqual(
      expect.arrayContaining(["event", "evicted", "Warning", "Evicted", "Recreate"]),
    );
    // A pod the kubelet ended without a pod reason (its sandboxd exited 0): the disruption says why.
    const ended = sandbox("ended", {}, { phase: "Ready", podName: "ended", startedAt: "x" });
    const d = await same(
      ended,
      children(ended, {
        phase: "Succeeded",
        conditions: [
          {
            type: "DisruptionTarget",
            status: "True",
            reason: "TerminationByKubelet",
            message: "The node had condition: [DiskPressure].",
          },
        ],
      }),
    );
    expect(lastFailureOf(d.writes)).toEqual([
      expect.objectContaining({
        reason: "TerminationByKubelet",
        message: "The node had condition: [DiskPressure].",
      }),
    ]);
  });

  test("says once why sandboxd was restarted in place (an OOM kill)", async () => {
    const oom = sandbox("oom", {}, { phase: "Ready", podName: "oom", startedAt: "x" });
    const objects = children(oom, {
      phase: "Running",
      containerStatuses: [
        {
          ready: false,
          restartCount: 1,
          state: { running: { startedAt: new Date(NOW).toISOString() } },
          lastState: { terminated: { reason: "OOMKilled", exitCode: 137 } },
        },
      ],
    });
    const first = await same(oom, objects);
    const said = first.writes.filter((w) => (w as unknown[])[0] === "event");
    expect(said).toContainEqual(expect.arrayContaining(["Warning", "OOMKilled", "Restart"]));
    const patch = JSON.stringify(
      first.writes.find((w) => JSON.stringify(w).includes("lastFailure")),
    );
    expect(patch).toContain('"reason":"OOMKilled"');
    expect(patch).toContain("was killed for using more than its memory limit (exit code 137)");
    // Recorded: the next pass says nothing new about the same restart.
    const podUID = objects.pods[0]!.metadata.uid!;
    const known = sandbox(
      "oom",
      {},
      {
        ...oom.status,
        lastFailure: { reason: "OOMKilled", message: "m", at: "t", podUID, restarts: 1 },
      },
    );
    const again = await same(known, objects);
    expect(again.writes.filter((w) => (w as unknown[])[1] === "OOMKilled")).toEqual([]);
    expect(JSON.stringify(again.writes)).not.toContain('"reason":"OOMKilled","message":"sandboxd');
  });

  test("clears a deleted namesake's children, found by their controller's uid", async () => {
    const sbx = sandbox("again");
    const old = children(sandbox("again", {}, undefined), { phase: "Running" });
    for (const list of Object.values(old)) {
      for (const o of list) {
        // The namespace's policies are no sandbox's: they stay.
        if (o.metadata.ownerReferences)
          o.metadata.ownerReferences[0]!.uid = "uid-of-the-deleted-one";
      }
    }
    const { writes } = await same(sbx, old);
    // The token Secret (a sandbox has no Service or NetworkPolicy of its own).
    expect(writes.filter((w) => (w as string[])[0] === "delete")).toHaveLength(1);
  });
});

describe("a warm pod from a transformed cache", () => {
  test("is claimable exactly when the full pod is (readiness, shape, packages annotations)", () => {
    const pool = served<SandboxPool>({
      apiVersion: "sandpit.dev/v1alpha1",
      kind: "SandboxPool",
      metadata: { name: "p", namespace: NS },
      spec: { warm: 1, maxActive: 5, template: { packages: ["requests"] } },
    });
    const uid = "pod-uid";
    const warm = (ready: string, packages: string) =>
      served<Pod>(
        {
          apiVersion: "v1",
          kind: "Pod",
          metadata: {
            name: "p-abc",
            namespace: NS,
            uid,
            annotations: { "sandpit.dev/shape-hash": "s1", "sandpit.dev/packages-ready": packages },
          },
        },
        {
          status: {
            phase: "Running",
            conditions: [{ type: "Ready", status: ready, lastProbeTime: null }],
            containerStatuses: [{ restartCount: 2, ready: ready === "True", state: {} }],
          },
        },
      );
    for (const p of [
      warm("True", `${uid}/2`),
      warm("True", `${uid}/1`),
      warm("False", `${uid}/2`),
    ]) {
      expect(claimable(pool, transforms.pod(p), "s1")).toBe(claimable(pool, p, "s1"));
    }
    expect(claimable(pool, transforms.pod(warm("True", `${uid}/2`)), "s1")).toBe(true);
  });

  test("keeps the token of a Secret and nothing else of its data", () => {
    const s = served<KObject & { data: Record<string, string> }>(
      { apiVersion: "v1", kind: "Secret", metadata: { name: "x", namespace: NS } },
      { data: { token: "dG9r", other: "b3RoZXI=" } },
    );
    const slim = transforms.secret(s);
    expect(slim.data).toEqual({ token: "dG9r" });
    expect(slim.metadata).not.toHaveProperty("managedFields");
    expect(slim.metadata.annotations).toBeUndefined();
  });

  test("keeps the key reserved sandboxes' tokens derive from", () => {
    const s = served<KObject & { data: Record<string, string> }>(
      { apiVersion: "v1", kind: "Secret", metadata: { name: TOKEN_KEY_SECRET, namespace: NS } },
      { data: { key: "a2V5", other: "b3RoZXI=" } },
    );
    expect(transforms.secret(s).data).toEqual({ key: "a2V5" });
  });
});

describe("a start whose progress was shown a moment ago", () => {
  const starting = () => {
    const sbx = sandbox("slow", {}, { phase: "Starting", podName: "slow", startedAt: "x" });
    const objects = children(sbx, {
      phase: "Pending",
      conditions: [
        { type: "PodScheduled", status: "False", reason: "Unschedulable", message: "0/1 nodes" },
      ],
    });
    return { sbx, objects };
  };
  const statusWrites = (w: unknown[]) =>
    w.filter((x) => (x as string[])[0] === "apply" && (x as string[])[1] === "sandboxes");

  test("writes its progress when none was shown within the window", async () => {
    const { sbx, objects } = starting();
    const { writes } = await reconcileFrom(sbx, objects, true);
    expect(statusWrites(writes)).toHaveLength(1);
  });

  test("holds a move to Pending back, and comes back for it within the window", async () => {
    const { sbx, objects } = starting();
    // The status as the last write left it, but Starting: the pod not scheduled moves it to
    // Pending, a move within the start.
    const written = statusWrites((await reconcileFrom(sbx, objects, true)).writes)[0] as unknown[];
    const status = structuredClone((written[2] as { status: Sandbox["status"] }).status)!;
    expect(status.phase).toBe("Pending");
    status.phase = "Starting";
    status.conditions = status.conditions!.filter((c) => c.type !== "Ready");
    const before = sandbox("slow", {}, status);
    const { writes, result } = await reconcileFrom(before, objects, true, true);
    expect(statusWrites(writes)).toEqual([]);
    expect(result?.requeueAfterMs).toBeGreaterThan(0);
    expect(result?.requeueAfterMs).toBeLessThanOrEqual(PROGRESS_EVERY_MS);
  });
});
