/**
 * Proof that test/cluster is a real Kubernetes: a node that runs the sandbox image and serves
 * sandboxd, Services, NetworkPolicy enforcement, dynamic volumes, garbage collection and Pod
 * Security admission, all through the API server with a client's credentials.
 */
import { randomBytes } from "node:crypto";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
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

  it("has room for 250 pods on its node", async () => {
    const nodeName = await waitFor("server scheduled", async () => {
      const p = await core.readNamespacedPod({ name: "server", namespace: ns });
      return p.spec?.nodeName;
    });
    const node = await core.readNode({ name: nodeName });
    expect(node.status?.allocatable?.pods).toBe("250");
  });

  it("gives a non-root, restricted sandboxd pod a writable PVC whose data outlives the pod and goes with the claim", async () => {
    // As the operator runs sandboxd: uid/gid 1000, read-only root, /tmp an emptyDir, the claim
    // at /mnt/user-data, in a namespace that enforces the restricted Pod Security profile.
    const restricted = `${ns}-pvc`;
    await core.createNamespace({
      body: {
        metadata: {
          name: restricted,
          labels: { "pod-security.kubernetes.io/enforce": "restricted" },
        },
      },
    });
    const sandbox: V1Pod = {
      metadata: { name: "sandbox" },
      spec: {
        automountServiceAccountToken: false,
        securityContext: {
          runAsNonRoot: true,
          runAsUser: 1000,
          runAsGroup: 1000,
          fsGroup: 1000,
          seccompProfile: { type: "RuntimeDefault" },
        },
        containers: [
          {
            name: "sandboxd",
            image,
            imagePullPolicy: "Never",
            env: [{ name: "SANDBOXD_TOKEN", value: token }],
            readinessProbe: { httpGet: { path: "/healthz", port: 8080 }, periodSeconds: 1 },
            securityContext: {
              allowPrivilegeEscalation: false,
              readOnlyRootFilesystem: true,
              capabilities: { drop: ["ALL"] },
            },
            volumeMounts: [
              { name: "data", mountPath: "/mnt/user-data" },
              { name: "tmp", mountPath: "/tmp" },
            ],
          },
        ],
        volumes: [
          { name: "data", persistentVolumeClaim: { claimName: "data" } },
          { name: "tmp", emptyDir: {} },
        ],
      },
    };
    /** Starts the pod, waits for sandboxd to be Ready, and runs COMMAND through its API. */
    const runInSandbox = async (command: string) => {
      await core.createNamespacedPod({ namespace: restricted, body: sandbox });
      const ip = await waitFor("sandboxd Ready", async () => {
        const p = await core.readNamespacedPod({ name: "sandbox", namespace: restricted });
        const ready = p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
        return ready ? p.status?.podIP : undefined;
      });
      const res = await fetch(`http://${ip}:8080/v1/commands/run`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ command }),
        signal: AbortSignal.timeout(30_000),
      });
      expect(res.status).toBe(200);
      return (await res.json()) as { exitCode: number; stdout: string; stderr: string };
    };
    const deletePod = async () => {
      await core.deleteNamespacedPod({ name: "sandbox", namespace: restricted });
      await waitFor("pod gone", () =>
        core.readNamespacedPod({ name: "sandbox", namespace: restricted }).then(
          () => undefined,
          (e: { code?: number }) => (e.code === 404 ? true : undefined),
        ),
      );
    };
    try {
      await core.createNamespacedPersistentVolumeClaim({
        namespace: restricted,
        body: {
          metadata: { name: "data" },
          spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "64Mi" } } },
        },
      });
      const pvName = await waitFor("claim Bound", async () => {
        const pvc = await core.readNamespacedPersistentVolumeClaim({
          name: "data",
          namespace: restricted,
        });
        return pvc.status?.phase === "Bound" ? pvc.spec?.volumeName : undefined;
      });
      const pv = await core.readPersistentVolume({ name: pvName });
      expect(pv.spec?.storageClassName).toBe("standard");
      expect(pv.metadata?.annotations?.["pv.kubernetes.io/provisioned-by"]).toBe(
        "sandpit.dev/host-path",
      );
      // The cluster runs on this machine, so its hostPath volumes are directories right here.
      const dir = pv.spec!.hostPath!.path;
      expect(statSync(dir).mode & 0o777).toBe(0o777);

      const wrote = await runInSandbox("id -u && echo kept > /mnt/user-data/proof.txt");
      expect(wrote, JSON.stringify(wrote)).toMatchObject({ exitCode: 0, stdout: "1000\n" });
      expect(statSync(join(dir, "proof.txt")).uid).toBe(1000);

      // The same pod deleted and created again on the same claim finds the file.
      await deletePod();
      const read = await runInSandbox("cat /mnt/user-data/proof.txt");
      expect(read, JSON.stringify(read)).toMatchObject({ exitCode: 0, stdout: "kept\n" });
      await deletePod();

      // reclaimPolicy Delete: deleting the claim removes the volume and its directory.
      await core.deleteNamespacedPersistentVolumeClaim({ name: "data", namespace: restricted });
      await waitFor("volume deleted", () =>
        core.readPersistentVolume({ name: pvName }).then(
          () => undefined,
          (e: { code?: number }) => (e.code === 404 ? true : undefined),
        ),
      );
      expect(existsSync(dir)).toBe(false);
    } finally {
      await core.deleteNamespace({ name: restricted }).catch(() => undefined);
    }
  }, 180_000);

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
