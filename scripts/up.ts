/**
 * `npm run up`: a whole local Sandpit, from a fresh clone.
 *
 *  1. a cluster: the one the kubeconfig points at when it answers (kind, say), otherwise this
 *     repository's own single-node cluster (test/cluster/up, as root);
 *  2. the sandbox, operator and provisioner images, built here and loaded into that cluster;
 *  3. the Helm chart (charts/sandpit), upgraded in place when it is already installed;
 *  4. a warm SandboxPool `default`, which the provisioner uses when a create names none;
 *  5. a first sandbox, created through the provisioner with the SDK's kubernetes provider,
 *     running Python and TypeScript;
 *
 * then prints the provisioner's URL, the API key and what to try next. Idempotent: run it again
 * to pick up changed sources. SANDPIT_UP_CLUSTER=local skips the kubeconfig and always uses the
 * local cluster.
 */
import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { homedir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import {
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  KubernetesObjectApi,
  PatchStrategy,
  PortForward,
  VersionApi,
} from "@kubernetes/client-node";
import { createProvider } from "@sandpit/sdk";
import Docker from "dockerode";
import { ensureServiceImage } from "@sandpit/images/service";
import { ensureDocker } from "../test/docker/dockerd.ts";
import { ensureTestImage } from "../test/docker/test-image.ts";
import {
  CLUSTER_STATE,
  type ClusterImages,
  chartImageArgs,
  ensureClusterImages,
} from "../test/cluster/images.ts";
import { machineAddressCidrs } from "../test/cluster/addresses.ts";

const run = promisify(execFile);
const ROOT = new URL("../", import.meta.url).pathname;
const RELEASE = "sandpit";
const SYSTEM_NS = "sandpit-system";
const SANDBOX_NS = "sandpit-sandboxes";
const POOL = "default";
/** The local cluster's DNS is a host process on its node address, not a kube-dns pod. */
const LOCAL_DNS_CIDR = "10.244.0.1/32";

const started = performance.now();
const elapsed = () => `${((performance.now() - started) / 1000).toFixed(1)} s`;
const say = (line: string) => process.stdout.write(`${line}\n`);
const step = (n: number, text: string) => say(`\n[${n}/5] ${text}  (${elapsed()})`);
const detail = (line: string) => say(`      ${line}`);

interface Cluster {
  kubeconfig: string;
  /** "local": test/cluster; "kind": a kind cluster (images go in with `kind load`); "other". */
  kind: "local" | "kind" | "other";
  name: string;
}

/** The kubeconfig the user's tools would use, if its cluster answers within 5 s. */
async function existingCluster(): Promise<Cluster | undefined> {
  if (process.env.SANDPIT_UP_CLUSTER === "local") return undefined;
  const file = process.env.KUBECONFIG?.split(":")[0] || join(homedir(), ".kube", "config");
  if (!existsSync(file)) return undefined;
  const kc = new KubeConfig();
  try {
    kc.loadFromFile(file);
    const version = kc.makeApiClient(VersionApi);
    const answer = await Promise.race([
      version.getCode(),
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error("no answer in 5 s")), 5000),
      ),
    ]);
    detail(`${file}: context ${kc.getCurrentContext()}, Kubernetes ${answer.gitVersion}`);
  } catch (err) {
    detail(`${file} does not answer (${(err as Error).message}): using the local cluster`);
    return undefined;
  }
  const context = kc.getCurrentContext();
  // This repository's own cluster, reached through a kubeconfig of the user's.
  if (kc.getCurrentCluster()?.caFile === join(CLUSTER_STATE, "pki", "ca.crt")) {
    return { kubeconfig: file, kind: "local", name: context };
  }
  return context.startsWith("kind-")
    ? { kubeconfig: file, kind: "kind", name: context.slice("kind-".length) }
    : { kubeconfig: file, kind: "other", name: context };
}

/** test/cluster/up, its progress lines shown as they come. */
async function localCluster(): Promise<Cluster> {
  if (process.getuid?.() !== 0) {
    throw new Error(
      "the local cluster runs kubelet and containerd, which need root: run `sudo npm run up`, " +
        "or point KUBECONFIG at a cluster of yours (kind create cluster --config kind-config.yaml)",
    );
  }
  const child = spawn(join(ROOT, "test/cluster/up"), [], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  let partial = "";
  child.stderr.on("data", (d: Buffer) => {
    const lines = (partial + d.toString()).split("\n");
    partial = lines.pop()!;
    for (const line of lines) if (line.trim()) detail(line.replace(/^\[cluster\] /, ""));
  });
  const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
  if (code !== 0) throw new Error(`test/cluster/up failed (exit ${code}); see the lines above`);
  return { kubeconfig: stdout.trim().split("\n").at(-1)!, kind: "local", name: "sandpit" };
}

/**
 * The four images in the cluster (sandbox, operator, provisioner, egress proxy). The local cluster imports them into its containerd; a kind
 * cluster gets them with `kind load docker-image`; any other cluster needs a registry it pulls
 * from (SANDPIT_REGISTRY), where they are pushed.
 */
async function images(cluster: Cluster): Promise<ClusterImages> {
  const log = (line: string) => detail(line);
  if (cluster.kind === "local") return ensureClusterImages({ log });
  const registry = process.env.SANDPIT_REGISTRY?.replace(/\/+$/, "");
  if (cluster.kind === "other" && !registry) {
    throw new Error(
      `the cluster of context ${cluster.name} cannot see images built here: set SANDPIT_REGISTRY ` +
        "to a registry it pulls from (the images are pushed there), or use kind or the local cluster",
    );
  }
  const engine = await ensureDocker({ log });
  try {
    const docker = new Docker({ socketPath: engine.socketPath });
    const built = {
      sandbox: (await ensureTestImage({ docker, log })).tag,
      operator: (await ensureServiceImage("operator", { docker, log })).tag,
      provisioner: (await ensureServiceImage("provisioner", { docker, log })).tag,
      egress: (await ensureServiceImage("egress", { docker, log })).tag,
    };
    const env = { ...process.env, DOCKER_HOST: `unix://${engine.socketPath}` };
    for (const tag of Object.values(built)) {
      if (cluster.kind === "kind") {
        await run("kind", ["load", "docker-image", tag, "--name", cluster.name], { env }).catch(
          (err: { message: string }) => {
            throw new Error(`kind load docker-image ${tag}: ${err.message}`);
          },
        );
        detail(`loaded ${tag} into kind cluster ${cluster.name}`);
      } else {
        await run("docker", ["tag", tag, `${registry}/${tag}`], { env });
        await run("docker", ["push", `${registry}/${tag}`], { env, timeout: 600_000 });
        detail(`pushed ${registry}/${tag}`);
      }
    }
    // kind names a loaded image docker.io/library/<tag>; pods find it under <tag>.
    const at = (tag: string) => (registry && cluster.kind === "other" ? `${registry}/${tag}` : tag);
    return {
      sandbox: at(built.sandbox),
      operator: at(built.operator),
      provisioner: at(built.provisioner),
      egress: at(built.egress),
    };
  } finally {
    await engine.stop();
  }
}

/** Helm: the one on PATH, else the one test/cluster/build.sh builds from source. */
async function helmBinary(): Promise<string> {
  const onPath = await run("sh", ["-c", "command -v helm"]).then(
    (r) => r.stdout.trim(),
    () => "",
  );
  if (onPath) return onPath;
  const { stdout } = await run(join(ROOT, "test/cluster/build.sh"), [], {
    timeout: 60 * 60_000,
  });
  return join(stdout.trim(), "helm");
}

async function installChart(
  cluster: Cluster,
  imgs: ClusterImages,
  publicUrl: string | undefined,
): Promise<void> {
  const helm = await helmBinary();
  const args = [
    "upgrade",
    "--install",
    RELEASE,
    join(ROOT, "charts/sandpit"),
    "--namespace",
    SYSTEM_NS,
    "--create-namespace",
    // CRDs applied earlier with `kubectl apply -f crds/` become the release's, and the chart's
    // schema wins over one another field manager applied (the test suites apply crds/ from
    // whatever checkout runs them): what is being installed is the source of truth.
    "--take-ownership",
    "--force-conflicts",
    "--wait",
    "--timeout",
    "5m",
    ...chartImageArgs(imgs),
    "--set",
    `sandboxes.namespace=${SANDBOX_NS}`,
    "--set",
    `provisioner.defaultPool=${POOL}`,
    // Sandboxes in other namespaces are left to whoever runs an operator there (the test
    // suites run their own, each in a namespace of its own).
    "--set",
    `operator.watchNamespace=${SANDBOX_NS}`,
    ...(cluster.kind === "local"
      ? [
          "--set-json",
          `sandboxes.dnsCidrs=["${LOCAL_DNS_CIDR}"]`,
          // The node's addresses its Node object does not list (test/cluster/addresses.ts).
          "--set-json",
          `sandboxes.egressExcludeCidrs=${JSON.stringify(machineAddressCidrs())}`,
        ]
      : []),
    ...(publicUrl ? ["--set", `provisioner.publicUrl=${publicUrl}`] : []),
  ];
  const { stdout } = await run(helm, args, {
    env: { ...process.env, KUBECONFIG: cluster.kubeconfig },
    timeout: 10 * 60_000,
    maxBuffer: 16 << 20,
  }).catch((err: { stderr?: string; message: string }) => {
    throw new Error(`helm upgrade --install: ${err.stderr || err.message}`);
  });
  const status = /^STATUS: (.*)$/m.exec(stdout)?.[1];
  const revision = /^REVISION: (.*)$/m.exec(stdout)?.[1];
  detail(`release ${RELEASE} in ${SYSTEM_NS}: ${status}, revision ${revision}`);
}

/** The pool the provisioner uses by default: two warm Python sandboxes, at most 20 running. */
async function applyPool(kc: KubeConfig): Promise<void> {
  const objects = KubernetesObjectApi.makeApiClient(kc);
  await objects.patch(
    {
      apiVersion: "sandpit.dev/v1alpha1",
      kind: "SandboxPool",
      metadata: { name: POOL, namespace: SANDBOX_NS },
      spec: {
        maxActive: 20,
        warm: 2,
        evictionPolicy: "LRU",
        defaultIdleTimeoutSeconds: 1800,
        template: { language: "python" },
      },
    },
    undefined,
    undefined,
    "sandpit-up",
    true,
    PatchStrategy.ServerSideApply,
  );
  const custom = kc.makeApiClient(CustomObjectsApi);
  const deadline = Date.now() + 180_000;
  for (;;) {
    const pool = (await custom.getNamespacedCustomObject({
      group: "sandpit.dev",
      version: "v1alpha1",
      namespace: SANDBOX_NS,
      plural: "sandboxpools",
      name: POOL,
    })) as { status?: { warmReady?: number } };
    const warm = pool.status?.warmReady ?? 0;
    if (warm >= 1 || Date.now() > deadline) {
      detail(`pool ${POOL}: ${warm} warm sandbox(es) ready`);
      return;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** http://<ClusterIP> of the provisioner's Service, or undefined before the chart made it. */
async function provisionerClusterUrl(kc: KubeConfig): Promise<string | undefined> {
  try {
    const svc = await kc
      .makeApiClient(CoreV1Api)
      .readNamespacedService({ name: `${RELEASE}-provisioner`, namespace: SYSTEM_NS });
    return svc.spec?.clusterIP ? `http://${svc.spec.clusterIP}` : undefined;
  } catch (err) {
    if ((err as { code?: number }).code === 404) return undefined;
    throw err;
  }
}

/**
 * Where this machine reaches the provisioner: its ClusterIP on the local cluster (the host
 * routes to Services there), else a port-forward kept open while this script runs.
 */
async function reachProvisioner(
  cluster: Cluster,
  kc: KubeConfig,
): Promise<{ url: string; close: () => void; lasting: boolean }> {
  const core = kc.makeApiClient(CoreV1Api);
  const svc = await core.readNamespacedService({
    name: `${RELEASE}-provisioner`,
    namespace: SYSTEM_NS,
  });
  if (cluster.kind === "local") {
    return { url: `http://${svc.spec!.clusterIP}`, close: () => undefined, lasting: true };
  }
  const pods = await core.listNamespacedPod({
    namespace: SYSTEM_NS,
    labelSelector: "app.kubernetes.io/name=sandpit-provisioner",
    fieldSelector: "status.phase=Running",
  });
  const pod = pods.items[0]?.metadata?.name;
  if (!pod) throw new Error("no running provisioner pod to forward to");
  const forward = new PortForward(kc);
  const server = createServer((socket) => {
    void forward.portForward(SYSTEM_NS, pod, [8080], socket, null, socket);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, close: () => server.close(), lasting: false };
}

async function apiKey(kc: KubeConfig): Promise<string> {
  const secret = await kc.makeApiClient(CoreV1Api).readNamespacedSecret({
    name: `${RELEASE}-api-keys`,
    namespace: SYSTEM_NS,
  });
  const keys = JSON.parse(Buffer.from(secret.data!["api-keys.json"]!, "base64").toString()) as {
    key: string;
  }[];
  return keys[0]!.key;
}

async function firstSandbox(url: string, key: string): Promise<string> {
  const provider = createProvider({
    use: "kubernetes",
    kubernetes: { provisionerUrl: url, apiKey: key },
  });
  const t = performance.now();
  const sbx = await provider.create({ language: "python", threadId: "hello", userId: "you" });
  detail(`sandbox ${sbx.sandboxId} ready in ${Math.round(performance.now() - t)} ms`);
  const py = await sbx.executeCode(
    'import platform\nprint(f"Python {platform.python_version()}: {sum(i * i for i in range(10))}")',
    "python",
  );
  detail(`python     → ${py.stdout.trim() || JSON.stringify(py)}`);
  const ts = await sbx.executeCode(
    "const squares: number[] = [1, 2, 3].map((n) => n * n);\nconsole.log(`TypeScript on Node ${process.version}: ${squares.join(', ')}`);",
    "typescript",
  );
  detail(`typescript → ${ts.stdout.trim() || JSON.stringify(ts)}`);
  return sbx.sandboxId;
}

async function main(): Promise<void> {
  say("Sandpit: bringing up a local Sandpit (cluster, operator, provisioner, a first sandbox)");
  step(1, "finding a cluster");
  const cluster = (await existingCluster()) ?? (await localCluster());
  detail(`cluster: ${cluster.kind === "local" ? "local (test/cluster)" : cluster.name}`);
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfig);

  step(2, "building the sandbox, operator and provisioner images and loading them");
  const imgs = await images(cluster);
  for (const [name, image] of Object.entries(imgs)) detail(`${name.padEnd(11)} ${image}`);

  step(3, "installing the Helm chart charts/sandpit");
  // The URLs the provisioner hands out (DeerFlow's sandbox_url) are built from its publicUrl,
  // never from a request's Host. On the local cluster this machine reaches the Service's
  // ClusterIP, which exists only once the chart has made the Service: a first install is
  // followed by an upgrade that names it (the address stays the same from then on).
  const localUrl = async () =>
    cluster.kind === "local" ? provisionerClusterUrl(kc) : Promise.resolve(undefined);
  const before = await localUrl();
  await installChart(cluster, imgs, before);
  const after = await localUrl();
  if (after !== before) await installChart(cluster, imgs, after);

  step(4, `applying the warm SandboxPool ${POOL}`);
  await applyPool(kc);

  step(5, "creating a first sandbox through the provisioner");
  const key = await apiKey(kc);
  const provisioner = await reachProvisioner(cluster, kc);
  let sandbox: string;
  try {
    sandbox = await firstSandbox(provisioner.url, key);
  } finally {
    provisioner.close();
  }

  const url = provisioner.lasting ? provisioner.url : "http://127.0.0.1:8080";
  const kubectl = `kubectl${cluster.kind === "local" ? ` --kubeconfig ${cluster.kubeconfig}` : ""}`;
  say(`
Sandpit is up (${elapsed()}).

  provisioner  ${url}${provisioner.lasting ? "" : `   (after: ${kubectl} -n ${SYSTEM_NS} port-forward service/${RELEASE}-provisioner 8080:80)`}
  API key      ${key}
  sandbox      ${sandbox} in namespace ${SANDBOX_NS} (pool ${POOL})

Try next:
  export SANDPIT_URL=${url} SANDPIT_API_KEY=${key}
  curl -s -X POST $SANDPIT_URL/v1/sandboxes -H "Authorization: Bearer $SANDPIT_API_KEY" \\
    -H 'content-type: application/json' -d '{"language":"python","threadId":"t1"}'
  curl -s $SANDPIT_URL/openapi.json                       # the whole API
  ${kubectl} get sandboxes,sandboxpools -n ${SANDBOX_NS}
  DeerFlow: provisioner_url=$SANDPIT_URL, with the key as X-API-Key
  From TypeScript: createProvider({ use: "kubernetes", kubernetes: { provisionerUrl, apiKey } })
${cluster.kind === "local" ? "\nStop it with test/cluster/down (its state stays for the next npm run up).\n" : ""}`);
}

main().catch((err: unknown) => {
  process.stderr.write(`\nnpm run up failed after ${elapsed()}: ${(err as Error).message}\n`);
  process.exit(1);
});
