/**
 * The operator in the cluster, from its own image and the manifests in operator/deploy/: two
 * replicas elect a leader, and the leader turns a Sandbox into a running sandboxd that executes
 * code with the token from its Secret.
 *
 * Isolation from other suites (one may run an out-of-cluster operator at the same time): the
 * manifests are applied under names of this run's own (system namespace, ClusterRole and
 * binding, Lease), and the operator watches only this run's namespace. Everything created is
 * deleted afterwards; the CRDs too, if this run installed them and no one else has used them.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import {
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  EventsV1Api,
  KubeConfig,
  KubernetesObjectApi,
  type KubernetesObject,
  PatchStrategy,
  type V1Deployment,
} from "@kubernetes/client-node";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { ensureOperatorImage, operatorImageTag } from "../../operator/image/build.ts";
import { ensureDocker } from "../docker/dockerd.ts";
import { CTR, loadIntoCluster } from "../cluster/images.ts";

const run = promisify(execFile);
const ROOT = new URL("../../", import.meta.url).pathname;
/** The cluster's DNS server is a host process on the node address, not a kube-dns pod. */
const DNS_CIDRS = "10.244.0.1/32";
const FIELD_MANAGER = "sandpit-test";

const kc = new KubeConfig();
kc.loadFromFile(inject("kubeconfig"));
const objects = KubernetesObjectApi.makeApiClient(kc);
const core = kc.makeApiClient(CoreV1Api);
const apps = kc.makeApiClient(AppsV1Api);
const leases = kc.makeApiClient(CoordinationV1Api);
const custom = kc.makeApiClient(CustomObjectsApi);
const events = kc.makeApiClient(EventsV1Api);
const sandboxImage = inject("clusterSandboxImage");

const id = randomBytes(3).toString("hex");
const systemNs = `sandpit-system-${id}`;
const ns = `op-incluster-${id}`;
const leaseName = `sandpit-operator-${id}`;
const log = (line: string) => process.stderr.write(`[in-cluster] ${line}\n`);

/** What this run created, deleted in this order in afterAll (namespaced objects go with theirs). */
const created: KubernetesObject[] = [];
let createdCrds: KubernetesObject[] = [];

async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined>,
  seconds: number,
): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(
    `${what}: not within ${seconds} s${last ? ` (last error: ${String(last)})` : ""}`,
  );
}

async function loadYaml(dir: string, files?: string[]): Promise<KubernetesObject[]> {
  const names = files ?? (await readdir(dir)).filter((f) => f.endsWith(".yaml")).sort();
  const out: KubernetesObject[] = [];
  for (const name of names) {
    for (const doc of parseAllDocuments(await readFile(join(dir, name), "utf8"))) {
      const obj = doc.toJS() as KubernetesObject | null;
      if (obj) out.push(obj);
    }
  }
  return out;
}

const apply = (obj: KubernetesObject) =>
  objects.patch(obj, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);

/**
 * The operator image in the cluster's containerd as `sandpit.local/operator:<tag>`. Docker is
 * needed only when the image for the current sources is not there yet.
 */
async function loadOperatorImage(): Promise<string> {
  let tag = await operatorImageTag();
  const local = (t: string) => `sandpit.local/operator:${t.split(":")[1]}`;
  const present = async (t: string) =>
    (await run("ctr", [...CTR, "images", "ls", "-q"])).stdout.split("\n").includes(local(t));
  if (await present(tag)) return local(tag);
  const engine = await ensureDocker({ log });
  try {
    const built = await ensureOperatorImage({
      docker: new Docker({ socketPath: engine.socketPath }),
      log,
    });
    tag = built.tag;
    log(`${built.built ? "built" : "found"} ${tag} in ${built.seconds.toFixed(1)} s`);
    await loadIntoCluster(tag, "operator", { dockerHost: `unix://${engine.socketPath}`, log });
  } finally {
    await engine.stop();
  }
  return local(tag);
}

/** operator/deploy/ under this run's names, with its image and settings. */
function customise(objs: KubernetesObject[], image: string): KubernetesObject[] {
  const rename = (name: string) => `${name}-${id}`;
  return objs.map((o) => {
    const obj = structuredClone(o) as KubernetesObject & Record<string, unknown>;
    const meta = obj.metadata!;
    if (obj.kind === "Namespace") meta.name = systemNs;
    else if (obj.kind === "ClusterRole" || obj.kind === "ClusterRoleBinding")
      meta.name = rename(meta.name!);
    else meta.namespace = systemNs;
    if (obj.kind === "ClusterRoleBinding") {
      const roleRef = obj.roleRef as { name: string };
      roleRef.name = rename(roleRef.name);
    }
    for (const s of (obj.subjects as { namespace?: string }[] | undefined) ?? [])
      s.namespace = systemNs;
    if (obj.kind === "Deployment") {
      const c = (obj as V1Deployment).spec!.template.spec!.containers[0]!;
      c.image = image;
      c.imagePullPolicy = "Never";
      const env = new Map((c.env ?? []).map((e) => [e.name, e]));
      const set = (name: string, value: string) => env.set(name, { name, value });
      set("SANDPIT_SYSTEM_NAMESPACE", systemNs);
      set("SANDPIT_SANDBOX_IMAGE", sandboxImage);
      set("SANDPIT_IMAGE_PULL_POLICY", "Never");
      set("SANDPIT_WATCH_NAMESPACE", ns);
      set("SANDPIT_LEASE_NAME", leaseName);
      set("SANDPIT_DNS_CIDRS", DNS_CIDRS);
      c.env = [...env.values()];
    }
    return obj;
  });
}

const header = (obj: KubernetesObject) => ({
  apiVersion: obj.apiVersion!,
  kind: obj.kind!,
  metadata: { name: obj.metadata!.name!, namespace: obj.metadata!.namespace },
});

async function exists(obj: KubernetesObject): Promise<boolean> {
  try {
    await objects.read(header(obj));
    return true;
  } catch (err) {
    if ((err as { code?: number }).code === 404) return false;
    throw err;
  }
}

async function podNames(): Promise<string[]> {
  const pods = await core.listNamespacedPod({
    namespace: systemNs,
    labelSelector: "app.kubernetes.io/name=sandpit-operator",
  });
  return pods.items.map((p) => p.metadata!.name!);
}

async function operatorLogs(tailLines = 40): Promise<string> {
  const out: string[] = [];
  for (const name of await podNames().catch(() => [])) {
    const text = await core
      .readNamespacedPodLog({ name, namespace: systemNs, tailLines })
      .catch((err: unknown) => `(no log: ${String(err)})`);
    out.push(`--- ${name}\n${text}`);
  }
  return out.join("\n");
}

beforeAll(async () => {
  const started = performance.now();
  const image = await loadOperatorImage();
  log(`operator image ${image} ready in ${((performance.now() - started) / 1000).toFixed(1)} s`);

  const crds = await loadYaml(join(ROOT, "crds"));
  const missing: KubernetesObject[] = [];
  for (const crd of crds) if (!(await exists(crd))) missing.push(crd);
  for (const crd of crds) await apply(crd);
  createdCrds = missing;
  for (const crd of crds) {
    await waitFor(
      `CRD ${crd.metadata!.name} established`,
      async () => {
        const c = (await objects.read(header(crd))) as {
          status?: { conditions?: { type: string; status: string }[] };
        };
        return c.status?.conditions?.some((x) => x.type === "Established" && x.status === "True")
          ? true
          : undefined;
      },
      60,
    );
  }

  await core.createNamespace({ body: { metadata: { name: ns } } });
  created.push({ apiVersion: "v1", kind: "Namespace", metadata: { name: ns } });
  const deploy = customise(
    await loadYaml(join(ROOT, "operator", "deploy"), [
      "namespace.yaml",
      "rbac.yaml",
      "deployment.yaml",
    ]),
    image,
  );
  for (const obj of deploy) {
    await apply(obj);
    if (["Namespace", "ClusterRole", "ClusterRoleBinding"].includes(obj.kind!)) created.push(obj);
  }
});

afterAll(async () => {
  for (const obj of created) {
    await objects
      .delete(obj, undefined, undefined, undefined, undefined, "Background")
      .catch((err: unknown) => {
        if ((err as { code?: number }).code !== 404) log(`deleting ${obj.kind}: ${String(err)}`);
      });
  }
  for (const name of [ns, systemNs]) {
    await waitFor(
      `namespace ${name} gone`,
      async () =>
        (await core.readNamespace({ name }).then(
          () => false,
          (err: unknown) => (err as { code?: number }).code === 404,
        ))
          ? true
          : undefined,
      180,
    ).catch((err: unknown) => log(String(err)));
  }
  // The CRDs go only if this run installed them and no one has Sandboxes or pools meanwhile.
  const inUse = async (plural: string) =>
    (await custom.listClusterCustomObject({ group: "sandpit.dev", version: "v1alpha1", plural }))
      .items.length > 0;
  if (createdCrds.length > 0 && !(await inUse("sandboxes")) && !(await inUse("sandboxpools"))) {
    for (const crd of createdCrds) await objects.delete(crd).catch(() => undefined);
  }
});

describe("the operator in the cluster", () => {
  it("runs two replicas from its image, one of which holds the Lease", async () => {
    const holder = await waitFor(
      `Lease ${leaseName} held`,
      async () => {
        const lease = await leases.readNamespacedLease({ name: leaseName, namespace: systemNs });
        const who = lease.spec?.holderIdentity;
        return who && (await podNames()).includes(who) ? who : undefined;
      },
      180,
    ).catch(async (err: unknown) => {
      throw new Error(`${String(err)}\n${await operatorLogs()}`);
    });
    log(`lease held by ${holder}`);
    const deployment = await waitFor(
      "both replicas ready",
      async () => {
        const d = await apps.readNamespacedDeployment({
          name: "sandpit-operator",
          namespace: systemNs,
        });
        return d.status?.readyReplicas === 2 ? d : undefined;
      },
      120,
    );
    const pod = deployment.spec!.template.spec!;
    expect(pod.containers[0]!.securityContext?.readOnlyRootFilesystem).toBe(true);
    expect(pod.securityContext?.runAsNonRoot).toBe(true);
  }, 330_000);

  it("makes a Sandbox Ready and runs code in it with its token", async () => {
    const name = "demo";
    await custom.createNamespacedCustomObject({
      group: "sandpit.dev",
      version: "v1alpha1",
      namespace: ns,
      plural: "sandboxes",
      body: {
        apiVersion: "sandpit.dev/v1alpha1",
        kind: "Sandbox",
        metadata: { name },
        spec: { language: "python" },
      },
    });
    type Sbx = { status?: { phase?: string; endpoint?: string; message?: string } };
    const sbx = await waitFor(
      "Sandbox Ready",
      async () => {
        const s = (await custom.getNamespacedCustomObject({
          group: "sandpit.dev",
          version: "v1alpha1",
          namespace: ns,
          plural: "sandboxes",
          name,
        })) as Sbx;
        return s.status?.phase === "Ready" ? s : undefined;
      },
      240,
    ).catch(async (err: unknown) => {
      throw new Error(`${String(err)}\n${await operatorLogs()}`);
    });
    const endpoint = sbx.status!.endpoint!;
    expect(endpoint).toMatch(/^\d+\.\d+\.\d+\.\d+:8080$/);

    const secret = await core.readNamespacedSecret({ name: `${name}-token`, namespace: ns });
    const token = Buffer.from(secret.data!.token!, "base64").toString("utf8");
    const res = await fetch(`http://${endpoint}/v1/code/execute`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ language: "python", code: "print(6*7)" }),
      signal: AbortSignal.timeout(60_000),
    });
    const body = (await res.json()) as { success: boolean; stdout: string };
    expect(res.status, JSON.stringify(body)).toBe(200);
    expect(body.success).toBe(true);
    expect(body.stdout.trim()).toBe("42");

    // The ClusterRole is enough: events were recorded, and nothing was refused.
    const recorded = await waitFor(
      "an event from the operator",
      async () => {
        const list = await events.listNamespacedEvent({ namespace: ns });
        const ours = list.items.filter((e) => e.reportingController === "sandpit.dev/operator");
        return ours.length > 0 ? ours : undefined;
      },
      30,
    );
    expect(recorded.map((e) => e.regarding?.name)).toContain(name);
    expect(await operatorLogs(1000)).not.toMatch(/forbidden/i);
  }, 300_000);
});
