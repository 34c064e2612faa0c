/**
 * Issue 18, row 2, attacked on the real cluster with the real operator and provisioner: a
 * sandbox writes past the size of its data volume (the claim at /mnt/user-data, 1Gi by
 * default). Before the test cluster's storage enforced sizes, 1.5 GiB written there landed on
 * the node's disk. Now the write fails with ENOSPC at the claim's size, the node holds no more
 * than that for the volume, and the Sandbox says (its DiskEnforced condition) whether its
 * storage class enforces the size at all (docs/security.md, docs/operations.md).
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, statSync, statfsSync } from "node:fs";
import { join } from "node:path";
import { StorageV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type ProvisionerApi,
  type Stack,
  provisionerCall,
  sandboxes,
  startStack,
  waitFor,
  waitForPhase,
} from "../cluster/harness.ts";
import { CLUSTER_STATE } from "../cluster/images.ts";

const KEY = "disk-attack-key-0123456789abcdef";
const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
/** A class of the same provisioner that does not say it enforces sizes. */
const SILENT_CLASS = `sec-disk-silent-${Math.random().toString(36).slice(2, 7)}`;

let stack: Stack;
const api: ProvisionerApi = (...args) => provisionerCall(stack.prov.url, ...args);
let storage: StorageV1Api;

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "sec-disk",
    keys: [{ key: KEY, tenant: "attacker", maxSandboxes: 10 }],
  });
  storage = stack.c.kc.makeApiClient(StorageV1Api);
}, 240_000);

afterAll(async () => {
  await stack?.stop();
  await storage?.deleteStorageClass({ name: SILENT_CLASS }).catch(() => undefined);
});

/** Writes zeros to `path` until `bytes` are written or a write fails; fsyncs at the end. */
const FILL = (path: string, bytes: number) => `
import errno, json, os
chunk = memoryview(bytes(16 << 20))
written, error = 0, None
fd = os.open(${JSON.stringify(path)}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
try:
    while written < ${bytes}:
        written += os.write(fd, chunk[: ${bytes} - written])
    os.fsync(fd)
except OSError as e:
    error = errno.errorcode.get(e.errno, str(e.errno))
os.close(fd)
print(json.dumps({"written": written, "error": error}))
`;

/** Bytes the node's disk holds for `path` (du: allocated blocks, not apparent sizes). */
function allocated(path: string): number {
  return Number(execFileSync("du", ["-s", "-B1", "-x", path], { encoding: "utf8" }).split("\t")[0]);
}

/** The host path of a claim's PersistentVolume. */
async function volumePath(claimName: string): Promise<string> {
  const claim = await stack.c.core.readNamespacedPersistentVolumeClaim({
    name: claimName,
    namespace: stack.ns,
  });
  const pv = await stack.c.core.readPersistentVolume({ name: claim.spec!.volumeName! });
  return pv.spec!.hostPath!.path;
}

async function condition(name: string, type: string) {
  const s = await sandboxes.get(stack.c, stack.ns, name);
  return s.status?.conditions?.find((c) => c.type === type);
}

describe("a sandbox's data volume (row 2)", () => {
  test(
    "1.5 GiB written to a 1Gi volume fails at its size, and the node holds no more",
    { timeout: 300_000 },
    async () => {
      const made = await api("POST", "/v1/sandboxes", KEY, { language: "python" });
      expect(made.status, JSON.stringify(made.json)).toBe(201);
      const id = made.json.id as string;
      const sbx = await sandboxes.get(stack.c, stack.ns, id);
      const path = await volumePath(`${sbx.status!.podName!}-data`);

      const run = await api("POST", `/v1/sandboxes/${id}/proxy/v1/code/execute`, KEY, {
        language: "python",
        code: FILL("/mnt/user-data/workspace/fill", 1.5 * GiB),
      });
      expect(run.status, JSON.stringify(run.json)).toBe(200);
      const { written, error } = JSON.parse(run.json.stdout as string) as {
        written: number;
        error: string | null;
      };
      // The attack: before, every byte was written (error null, written 1.5 GiB).
      expect(error ?? `no error: all ${written} bytes written`).toMatch(/^(ENOSPC|EDQUOT)$/);
      expect(written).toBeLessThanOrEqual(GiB);
      expect(written).toBeGreaterThan(0.85 * GiB); // the size is the sandbox's to use
      // What the node's disk holds for the volume: its files, and the image they live in.
      expect(allocated(path)).toBeLessThanOrEqual(GiB);
      if (existsSync(`${path}.img`)) expect(allocated(`${path}.img`)).toBeLessThanOrEqual(GiB);

      // The sandbox still works, and deleting it gives the space back.
      const rm = await api("POST", `/v1/sandboxes/${id}/proxy/v1/code/execute`, KEY, {
        language: "python",
        code: "import os; os.remove('/mnt/user-data/workspace/fill'); print('ok')",
      });
      expect(rm.json.stdout).toBe("ok\n");
      expect((await condition(id, "DiskEnforced"))?.status).toBe("True");
      expect((await api("DELETE", `/v1/sandboxes/${id}`, KEY)).status).toBe(204);
      await waitFor("the volume removed from the node", 120_000, async () =>
        existsSync(path) || existsSync(`${path}.img`) ? undefined : true,
      );
    },
  );

  test(
    "a size of its own is held too, and a write past it fails",
    { timeout: 240_000 },
    async () => {
      await sandboxes.create(stack.c, stack.ns, "small-disk", { storage: { size: "64Mi" } });
      const ready = await waitForPhase(stack.c, stack.ns, "small-disk", "Ready", 120_000);
      const path = await volumePath(`${ready.status!.podName!}-data`);
      const token = Buffer.from(
        (await stack.c.core.readNamespacedSecret({ name: "small-disk-token", namespace: stack.ns }))
          .data!.token!,
        "base64",
      ).toString();
      const res = await fetch(`http://${ready.status!.endpoint!}/v1/code/execute`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ language: "python", code: FILL("/mnt/user-data/fill", 200 * MiB) }),
      });
      const { written, error } = JSON.parse(((await res.json()) as { stdout: string }).stdout) as {
        written: number;
        error: string | null;
      };
      expect(error ?? `no error: all ${written} bytes written`).toMatch(/^(ENOSPC|EDQUOT)$/);
      expect(written).toBeLessThanOrEqual(64 * MiB);
      expect(allocated(path)).toBeLessThanOrEqual(64 * MiB);
      if (existsSync(`${path}.img`)) {
        expect(statSync(`${path}.img`).size).toBe(64 * MiB); // sparse: its size, not its blocks
        expect(allocated(`${path}.img`)).toBeLessThanOrEqual(64 * MiB);
      }
    },
  );
});

describe("/tmp, a tmpfs of at most 512Mi", () => {
  // Memory-backed with a sizeLimit: the kubelet mounts a tmpfs of that size (never more than
  // the pod's memory limit), so a write past it fails at once, nothing of it reaches the node's
  // disk, and its pages count against the pod's memory limit (operator/src/workload/manifests.ts).
  // Before, /tmp was a disk-backed emptyDir: 700 MiB all landed on the node's disk and the
  // kubelet evicted the pod 50 to 77 s later.
  test(
    "700 MiB written to it fail with ENOSPC at 512 MiB, and the sandbox stays Ready and answers",
    { timeout: 300_000 },
    async () => {
      const made = await api("POST", "/v1/sandboxes", KEY, { language: "python" });
      expect(made.status, JSON.stringify(made.json)).toBe(201);
      const id = made.json.id as string;
      const run = await api("POST", `/v1/sandboxes/${id}/proxy/v1/code/execute`, KEY, {
        language: "python",
        code: FILL("/tmp/fill", 700 * MiB),
      });
      expect(run.status, JSON.stringify(run.json)).toBe(200);
      const { written, error } = JSON.parse(run.json.stdout as string) as {
        written: number;
        error: string | null;
      };
      expect(error ?? `no error: all ${written} bytes written`).toBe("ENOSPC");
      expect(written).toBeLessThanOrEqual(512 * MiB);
      expect(written).toBeGreaterThan(0.85 * 512 * MiB);

      // On the node: the volume is a tmpfs of 512Mi, so the node's disk holds none of it.
      const sbx = await sandboxes.get(stack.c, stack.ns, id);
      const pod = await stack.c.core.readNamespacedPod({
        name: sbx.status!.podName!,
        namespace: stack.ns,
      });
      const dir = join(
        CLUSTER_STATE,
        "kubelet/root/pods",
        pod.metadata!.uid!,
        "volumes/kubernetes.io~empty-dir/tmp",
      );
      const mount = readFileSync("/proc/mounts", "utf8")
        .split("\n")
        .map((line) => line.split(" "))
        .find((f) => f[1] === dir);
      expect(mount?.[2], `the mount at ${dir}`).toBe("tmpfs");
      const fs = statfsSync(dir);
      expect(fs.blocks * fs.bsize).toBe(512 * MiB);
      expect(allocated(dir)).toBeLessThanOrEqual(512 * MiB);

      // The kubelet has measured the full volume, and the pod's memory holds it (the node is
      // safe: the pod's memory limit bounds it); the sandbox is not evicted for it.
      const seen = await waitFor("the kubelet's stats to show /tmp full", 120_000, async () => {
        // Typed as a string, but the client parses the JSON it gets.
        const raw: unknown = await stack.c.core.connectGetNodeProxyWithPath({
          name: pod.spec!.nodeName!,
          path: "stats/summary",
        });
        const summary = (typeof raw === "string" ? JSON.parse(raw) : raw) as StatsSummary;
        const p = summary.pods.find((s) => s.podRef.uid === pod.metadata!.uid);
        const tmp = p?.volume?.find((v) => v.name === "tmp");
        // A new pod's memory is measured a little after its volumes: both, then.
        return tmp && tmp.usedBytes >= 0.85 * 512 * MiB && p!.memory?.workingSetBytes
          ? p
          : undefined;
      });
      expect(seen.memory!.workingSetBytes).toBeGreaterThanOrEqual(0.85 * 512 * MiB);
      const echo = await api("POST", `/v1/sandboxes/${id}/proxy/v1/code/execute`, KEY, {
        language: "python",
        code: "import os; print(os.path.getsize('/tmp/fill'))",
      });
      expect(echo.json.stdout).toBe(`${written}\n`);
      const after = await sandboxes.get(stack.c, stack.ns, id);
      expect(after.status?.phase).toBe("Ready");
      expect(after.status?.lastFailure).toBeUndefined();
      expect((await api("DELETE", `/v1/sandboxes/${id}`, KEY)).status).toBe(204);
    },
  );
});

/** The parts of the kubelet's stats summary read here. */
interface StatsSummary {
  pods: {
    podRef: { uid: string };
    memory?: { workingSetBytes?: number };
    volume?: { name: string; usedBytes: number }[];
  }[];
}

describe("the DiskEnforced condition", () => {
  test("a class that does not say it enforces sizes is named on the Sandbox", async () => {
    await storage.createStorageClass({
      body: {
        metadata: { name: SILENT_CLASS },
        provisioner: "sandpit.dev/host-path",
        reclaimPolicy: "Delete",
        volumeBindingMode: "Immediate",
      },
    });
    await sandboxes.create(stack.c, stack.ns, "silent", {
      storage: { storageClassName: SILENT_CLASS },
    });
    await waitForPhase(stack.c, stack.ns, "silent", "Ready", 120_000);
    const c = await condition("silent", "DiskEnforced");
    expect(c).toMatchObject({ status: "False", reason: "StorageClassDoesNotEnforce" });
    expect(c!.message).toContain(`StorageClass "${SILENT_CLASS}"`);

    // Annotated, the class is trusted, and the Sandbox says so without being touched.
    await storage.patchStorageClass({
      name: SILENT_CLASS,
      // A JSON patch (client-node's default for patches); the class has no annotations yet.
      body: [
        {
          op: "add",
          path: "/metadata/annotations",
          value: { "sandpit.dev/enforces-capacity": "true" },
        },
      ],
    });
    await waitFor("DiskEnforced True", 30_000, async () =>
      (await condition("silent", "DiskEnforced"))?.status === "True" ? true : undefined,
    );
  });

  test("a class that does not exist is named too", async () => {
    await sandboxes.create(stack.c, stack.ns, "no-class", {
      storage: { storageClassName: "sec-disk-no-such-class" },
    });
    const c = await waitFor("DiskEnforced", 60_000, () => condition("no-class", "DiskEnforced"));
    expect(c).toMatchObject({ status: "False", reason: "StorageClassNotFound" });
  });
});
