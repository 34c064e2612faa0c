/**
 * Proof that test/cluster is a real Kubernetes: a node that runs the sandbox image and serves
 * sandboxd, Services, NetworkPolicy enforcement, dynamic volumes, garbage collection and Pod
 * Security admission, all through the API server with a client's credentials.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import {
  AppsV1Api,
  CoreV1Api,
  KubeConfig,
  NetworkingV1Api,
  type V1Pod,
} from "@kubernetes/client-node";

const kc = new KubeConfig();
kc.loadFromFile(inject("kubeconfig"));
const core = kc.makeApiClient(CoreV1Api);
const net = kc.makeApiClient(NetworkingV1Api);
const apps = kc.makeApiClient(AppsV1Api);
const image = inject("clusterSandboxImage");
const ns = `suite-${randomBytes(3).toString("hex")}`;
const token = randomBytes(32).toString("hex");

/** A restricted-profile-compliant container of the sandbox image. */
function container(name: string, command?: string[]): V1Pod["spec"] {
  return {
    restartPolicy: command ? "Never" : "Always",
    automountServiceAccountToken: false,
    securityContext: {
      runAsNonRoot: true,
      runAsUser: 1000,
      seccompProfile: { type: "RuntimeDefault" },
    },
    containers: [
      {
        name,
        image,
        imagePullPolicy: "Never",
        ...(command ? { command } : {}),
        env: [{ name: "SANDBOXD_TOKEN", value: token }],
        ports: [{ containerPort: 8080 }],
        readinessProbe: command
          ? undefined
          : { httpGet: { path: "/healthz", port: 8080 }, periodSeconds: 1 },
        securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
      },
    ],
  };
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

function finished(phase: string): string | undefined {
  return phase === "Succeeded" || phase === "Failed" ? phase : undefined;
}

async function podPhase(name: string): Promise<string> {
  return (await core.readNamespacedPod({ name, namespace: ns })).status?.phase ?? "Unknown";
}

/** Runs a one-shot pod to completion; true when its command exited 0. */
async function runPod(
  name: string,
  script: string,
  labels: Record<string, string> = {},
  extra: Partial<NonNullable<V1Pod["spec"]>> = {},
): Promise<{ ok: boolean; log: string }> {
  await core.createNamespacedPod({
    namespace: ns,
    body: {
      metadata: { name, labels },
      spec: { ...container("c", ["sh", "-c", script])!, ...extra },
    },
  });
  const phase = await waitFor(`pod ${name} finished`, async () => finished(await podPhase(name)));
  const log = await core.readNamespacedPodLog({ name, namespace: ns });
  return { ok: phase === "Succeeded", log };
}

beforeAll(async () => {
  await core.createNamespace({ body: { metadata: { name: ns } } });
  await core.createNamespacedPod({
    namespace: ns,
    body: { metadata: { name: "server", labels: { app: "server" } }, spec: container("sandboxd") },
  });
});
afterAll(async () => {
  await core.deleteNamespace({ name: ns }).catch(() => undefined);
});

describe("the local cluster", () => {
  it("has a Ready node", async () => {
    const nodes = await core.listNode();
    const ready = nodes.items[0]?.status?.conditions?.find((c) => c.type === "Ready");
    expect(ready?.status).toBe("True");
  });

  it("runs the sandbox image, and sandboxd passes its readiness probe", async () => {
    await waitFor("server Ready", async () => {
      const p = await core.readNamespacedPod({ name: "server", namespace: ns });
      return p.status?.conditions?.find((c) => c.type === "Ready" && c.status === "True")
        ? true
        : undefined;
    });
  });

  it("reaches a Service from the host", async () => {
    await core.createNamespacedService({
      namespace: ns,
      body: {
        metadata: { name: "sandboxd" },
        spec: { selector: { app: "server" }, ports: [{ port: 80, targetPort: 8080 }] },
      },
    });
    const svc = await core.readNamespacedService({ name: "sandboxd", namespace: ns });
    const body = await waitFor("Service answers", async () => {
      const res = await fetch(`http://${svc.spec!.clusterIP}/healthz`, {
        signal: AbortSignal.timeout(2000),
      });
      return res.ok ? ((await res.json()) as { ok: boolean }) : undefined;
    });
    expect(body.ok).toBe(true);
    // Without the token, sandboxd refuses commands.
    const res = await fetch(`http://${svc.spec!.clusterIP}/v1/commands/run`, {
      method: "POST",
      body: "{}",
    });
    expect(res.status).toBe(401);
  });

  it("resolves Service names inside the cluster", async () => {
    const r = await runPod("dns", `curl -fsS -m 5 http://sandboxd.${ns}.svc.cluster.local/healthz`);
    expect(r.ok, r.log).toBe(true);
    expect(r.log).toContain('"ok":true');
  });

  it("enforces NetworkPolicy: default deny blocks pod-to-pod, an allow rule lets it through", async () => {
    const server = await core.readNamespacedPod({ name: "server", namespace: ns });
    const ip = server.status!.podIP!;
    // Retried for up to ~12 s: the enforcer learns a new pod's address from a watch event, so
    // a pod's first packets may come before its rules; a denial must hold for the whole time.
    const probe = `for i in 1 2 3 4 5 6; do curl -fsS -m 2 -o /dev/null http://${ip}:8080/healthz && exit 0; sleep 0.5; done; exit 1`;
    expect((await runPod("before-policy", probe, { role: "client" })).ok).toBe(true);
    await net.createNamespacedNetworkPolicy({
      namespace: ns,
      body: {
        metadata: { name: "default-deny" },
        spec: { podSelector: {}, policyTypes: ["Ingress"] },
      },
    });
    await new Promise((r) => setTimeout(r, 3000)); // kube-router syncs on the policy event
    expect((await runPod("denied", probe, { role: "client" })).ok).toBe(false);
    await net.createNamespacedNetworkPolicy({
      namespace: ns,
      body: {
        metadata: { name: "allow-clients" },
        spec: {
          podSelector: { matchLabels: { app: "server" } },
          ingress: [
            {
              _from: [{ podSelector: { matchLabels: { role: "client" } } }],
              ports: [{ port: 8080 }],
            },
          ],
        },
      },
    });
    await new Promise((r) => setTimeout(r, 3000));
    expect((await runPod("allowed", probe, { role: "client" })).ok).toBe(true);
    expect((await runPod("not-a-client", probe, { role: "other" })).ok).toBe(false);
  }, 180_000);

  it("binds a PVC dynamically, and its data survives the pod", async () => {
    await core.createNamespacedPersistentVolumeClaim({
      namespace: ns,
      body: {
        metadata: { name: "data" },
        spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "64Mi" } } },
      },
    });
    const volume = { volumes: [{ name: "data", persistentVolumeClaim: { claimName: "data" } }] };
    // The hostPath provisioner makes root-owned directories, so these two pods run as root.
    const mount = (spec: NonNullable<V1Pod["spec"]>) => {
      spec.containers[0]!.volumeMounts = [{ name: "data", mountPath: "/mnt/user-data" }];
      spec.securityContext = { runAsUser: 0, runAsNonRoot: false };
      return spec;
    };
    const write = mount({
      ...container("c", ["sh", "-c", "echo kept > /mnt/user-data/proof.txt"])!,
      ...volume,
    });
    await core.createNamespacedPod({
      namespace: ns,
      body: { metadata: { name: "writer" }, spec: write },
    });
    await waitFor("writer done", async () =>
      (await podPhase("writer")) === "Succeeded" ? true : undefined,
    );
    const pvc = await core.readNamespacedPersistentVolumeClaim({ name: "data", namespace: ns });
    expect(pvc.status?.phase).toBe("Bound");
    await core.deleteNamespacedPod({ name: "writer", namespace: ns });
    const read = mount({ ...container("c", ["cat", "/mnt/user-data/proof.txt"])!, ...volume });
    await core.createNamespacedPod({
      namespace: ns,
      body: { metadata: { name: "reader" }, spec: read },
    });
    await waitFor("reader done", async () =>
      (await podPhase("reader")) === "Succeeded" ? true : undefined,
    );
    expect(await core.readNamespacedPodLog({ name: "reader", namespace: ns })).toBe("kept\n");
  }, 120_000);

  it("garbage-collects the dependents of a deleted owner", async () => {
    const owner = await apps.createNamespacedDeployment({
      namespace: ns,
      body: {
        metadata: { name: "owner" },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: "owned" } },
          template: { metadata: { labels: { app: "owned" } }, spec: container("c") },
        },
      },
    });
    await waitFor("ReplicaSet created", async () =>
      (await apps.listNamespacedReplicaSet({ namespace: ns })).items.length ? true : undefined,
    );
    await apps.deleteNamespacedDeployment({
      name: owner.metadata!.name!,
      namespace: ns,
      body: { propagationPolicy: "Background" },
    });
    await waitFor("dependents collected", async () => {
      const rs = await apps.listNamespacedReplicaSet({ namespace: ns });
      const pods = await core.listNamespacedPod({ namespace: ns, labelSelector: "app=owned" });
      return rs.items.length === 0 && pods.items.length === 0 ? true : undefined;
    });
  }, 120_000);

  it("rejects a privileged pod in a namespace with the restricted profile", async () => {
    const restricted = `${ns}-restricted`;
    await core.createNamespace({
      body: {
        metadata: {
          name: restricted,
          labels: { "pod-security.kubernetes.io/enforce": "restricted" },
        },
      },
    });
    try {
      const err = await core
        .createNamespacedPod({
          namespace: restricted,
          body: {
            metadata: { name: "priv" },
            spec: { containers: [{ name: "c", image, securityContext: { privileged: true } }] },
          },
        })
        .then(
          () => null,
          (e: { code?: number; body?: string }) => e,
        );
      expect(err?.code).toBe(403);
      expect(String(err?.body)).toContain("restricted");
    } finally {
      await core.deleteNamespace({ name: restricted });
    }
  });
});
