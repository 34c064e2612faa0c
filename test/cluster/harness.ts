/**
 * What the cluster suites share (operator, provisioner, chart, the Kubernetes contract run) and
 * the cluster benchmarks use too: the operator started as a real process out of cluster (each
 * test file watches only its own namespace and holds its own Lease, so files run side by side),
 * typed access to Sandboxes and their children, bounded waits, and sandboxd calls.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream, readFileSync, readdirSync } from "node:fs";
import { connect, createServer } from "node:net";
import { join } from "node:path";
import {
  ApiextensionsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  KubernetesObjectApi,
  NetworkingV1Api,
  PatchStrategy,
  setHeaderOptions,
} from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import {
  ANNOTATION,
  GROUP,
  TOKEN_KEY_SECRET,
  VERSION,
  tokenSecretName,
  warmPodToken,
} from "@sandpit/operator/api";
import { type KObject, Kube, type Resource } from "@sandpit/operator/kube/client";
import { machineAddressCidrs } from "./addresses.ts";

const CRDS: Resource = {
  group: "apiextensions.k8s.io",
  version: "v1",
  plural: "customresourcedefinitions",
  kind: "CustomResourceDefinition",
};

const ROOT = new URL("../../", import.meta.url).pathname;

export interface Clients {
  kc: KubeConfig;
  core: CoreV1Api;
  custom: CustomObjectsApi;
  net: NetworkingV1Api;
  objects: KubernetesObjectApi;
}

export function clients(kubeconfig: string): Clients {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  return {
    kc,
    core: kc.makeApiClient(CoreV1Api),
    custom: kc.makeApiClient(CustomObjectsApi),
    net: kc.makeApiClient(NetworkingV1Api),
    objects: KubernetesObjectApi.makeApiClient(kc),
  };
}

/**
 * Applies crds/ (server-side, idempotent) and waits until both are Established. The operator's
 * raw JSON client does the apply: client-node's typed models would drop schema fields
 * (enum, x-kubernetes-validations) on the way.
 */
export async function ensureCrds(c: Clients): Promise<void> {
  const ext = c.kc.makeApiClient(ApiextensionsV1Api);
  const kube = new Kube(c.kc, { fieldManager: "sandpit-tests" });
  const dir = join(ROOT, "crds");
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".yaml"))) {
    for (const doc of parseAllDocuments(readFileSync(join(dir, file), "utf8"))) {
      await kube.apply(CRDS, doc.toJS() as KObject);
    }
  }
  for (const name of ["sandboxes.sandpit.dev", "sandboxpools.sandpit.dev"]) {
    await waitFor(`CRD ${name} Established`, 30_000, async () => {
      const crd = await ext.readCustomResourceDefinition({ name });
      return crd.status?.conditions?.some((x) => x.type === "Established" && x.status === "True");
    });
  }
}

export async function createNamespace(c: Clients, prefix: string): Promise<string> {
  const name = `${prefix}-${Math.random().toString(36).slice(2, 7)}`;
  await c.core.createNamespace({
    body: { metadata: { name, labels: { "sandpit.dev/test": "operator" } } },
  });
  return name;
}

export async function deleteNamespace(c: Clients, name: string): Promise<void> {
  await c.core.deleteNamespace({ name }).catch(() => undefined);
}

/** Polls `check` until it returns a truthy value; API errors count as "not yet". */
export async function waitFor<T>(
  what: string,
  timeoutMs: number,
  check: () => Promise<T | undefined | false | null>,
  everyMs = 100,
): Promise<T> {
  const until = performance.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (performance.now() > until) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ""}`,
      );
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/**
 * Starts a service on ports freePort picked, and again on new ones when another process took
 * one of them between the pick and the service's listen (EADDRINUSE), at most 3 times.
 */
async function onFreePorts<T>(start: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start();
    } catch (err) {
      if (attempt >= 3 || !String((err as Error).message).includes("EADDRINUSE")) throw err;
    }
  }
}

/**
 * Runs one of the project's services (`script`, relative to the repository) as a child process
 * with just `env` (plus PATH and HOME), keeping its recent output, and waits for `readyUrl`.
 */
async function spawnService(
  name: string,
  script: string,
  env: Record<string, string>,
  readyUrl: string,
) {
  const proc = spawn(process.execPath, [join(ROOT, script)], {
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/root", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  // SANDPIT_SERVICE_LOGS=<dir> keeps every service's whole log there too, for a failure found
  // after the run (a benchmark's, say): the in-memory copy keeps only the last megabyte or two.
  const dir = process.env.SANDPIT_SERVICE_LOGS;
  const file = dir ? createWriteStream(join(dir, `${name}-${proc.pid}.log`)) : undefined;
  const keep = (b: Buffer) => {
    file?.write(b);
    out += b.toString();
    if (out.length > 2_000_000) out = out.slice(-1_000_000);
  };
  proc.stdout!.on("data", keep);
  proc.stderr!.on("data", keep);
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  await waitFor(`the ${name}'s ${new URL(readyUrl).pathname}`, 60_000, async () => {
    if (proc.exitCode !== null)
      throw new Error(`${name} exited ${proc.exitCode}:\n${out.slice(-3000)}`);
    return (await fetch(readyUrl)).ok;
  });
  const signal = (sig: NodeJS.Signals) => async () => {
    if (proc.exitCode === null) proc.kill(sig);
    await exited;
  };
  return { proc, logs: () => out, stop: signal("SIGTERM"), kill9: signal("SIGKILL") };
}

export interface OperatorProcess {
  proc: ChildProcess;
  probePort: number;
  identity: string;
  logs: () => string;
  /** SIGKILL, no cleanup: what a crash looks like. */
  kill9: () => Promise<void>;
  /** SIGTERM and wait: a graceful shutdown. */
  stop: () => Promise<void>;
  metrics: () => Promise<string>;
}

export interface OperatorOptions {
  kubeconfig: string;
  namespace: string;
  image: string;
  leaseName?: string;
  identity?: string;
  env?: Record<string, string>;
  /** Its main module, relative to the repository; default its source, operator/src/main.ts. */
  entry?: string;
}

export function startOperator(o: OperatorOptions): Promise<OperatorProcess> {
  return onFreePorts(() => startOperatorOnce(o));
}

async function startOperatorOnce(o: OperatorOptions): Promise<OperatorProcess> {
  const probePort = await freePort();
  const identity = o.identity ?? `op-${Math.random().toString(36).slice(2, 8)}`;
  const service = await spawnService(
    "operator",
    o.entry ?? "operator/src/main.ts",
    {
      SANDPIT_KUBECONFIG: o.kubeconfig,
      SANDPIT_WATCH_NAMESPACE: o.namespace,
      SANDPIT_SYSTEM_NAMESPACE: o.namespace,
      SANDPIT_LEADER_ELECTION_NAMESPACE: o.namespace,
      SANDPIT_LEASE_NAME: o.leaseName ?? "sandpit-operator",
      SANDPIT_IDENTITY: identity,
      SANDPIT_SANDBOX_IMAGE: o.image,
      SANDPIT_IMAGE_PULL_POLICY: "IfNotPresent",
      // The test cluster's resolver runs on the node address, not in a pod.
      SANDPIT_DNS_CIDRS: "10.244.0.1/32",
      // The node's addresses its Node object does not list, as the chart is given them.
      SANDPIT_EGRESS_EXCLUDE_CIDRS: machineAddressCidrs().join(","),
      SANDPIT_PROBE_ADDRESS: `127.0.0.1:${probePort}`,
      SANDPIT_CPU_REQUEST: "10m",
      SANDPIT_LOG_LEVEL: "info",
      ...o.env,
    },
    `http://127.0.0.1:${probePort}/readyz`,
  );
  return {
    ...service,
    probePort,
    identity,
    metrics: async () => (await fetch(`http://127.0.0.1:${probePort}/metrics`)).text(),
  };
}

export interface SandboxObject {
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    creationTimestamp?: string;
    resourceVersion?: string;
    annotations?: Record<string, string>;
  };
  spec: Record<string, unknown>;
  status?: {
    phase?: string;
    podName?: string;
    endpoint?: string;
    readyAt?: string;
    expiresAt?: string;
    lastActivityTime?: string;
    lastFailure?: { reason: string; message: string; at: string; podUID: string; restarts: number };
    conditions?: {
      type: string;
      status: string;
      reason: string;
      message: string;
      lastTransitionTime: string;
    }[];
  };
}

export const sandboxes = {
  create: (c: Clients, namespace: string, name: string, spec: Record<string, unknown>) =>
    c.custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: "sandboxes",
      fieldValidation: "Strict",
      body: { apiVersion: `${GROUP}/${VERSION}`, kind: "Sandbox", metadata: { name }, spec },
    }) as Promise<SandboxObject>,
  get: (c: Clients, namespace: string, name: string) =>
    c.custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: "sandboxes",
      name,
    }) as Promise<SandboxObject>,
  list: async (c: Clients, namespace: string) =>
    (
      (await c.custom.listNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: "sandboxes",
      })) as { items: SandboxObject[] }
    ).items,
  patchSpec: (c: Clients, namespace: string, name: string, spec: Record<string, unknown>) =>
    c.custom.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace, plural: "sandboxes", name, body: { spec } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    ),
  /** What the provisioner does: report activity on the status, under its own field manager. */
  reportActivity: (c: Clients, namespace: string, name: string, at = new Date()) =>
    c.custom.patchNamespacedCustomObjectStatus(
      {
        group: GROUP,
        version: VERSION,
        namespace,
        plural: "sandboxes",
        name,
        fieldManager: "sandpit-tests",
        body: { status: { lastActivityTime: at.toISOString() } },
      },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    ),
  delete: (c: Clients, namespace: string, name: string) =>
    c.custom.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: "sandboxes",
      name,
    }),
};

/**
 * The cluster's Sandboxes in `ns` by (tenant, user, thread) label, each with the names holding
 * it: what "one sandbox per thread" is checked against.
 */
export async function sandboxesByThread(c: Clients, ns: string): Promise<Record<string, string[]>> {
  const byThread = new Map<string, string[]>();
  for (const s of await sandboxes.list(c, ns)) {
    const l = (s.metadata as { labels?: Record<string, string> }).labels ?? {};
    const key = `${l["sandpit.dev/tenant"]}/${l["sandpit.dev/user"]}/${l["sandpit.dev/thread"]}`;
    byThread.set(key, [...(byThread.get(key) ?? []), s.metadata.name]);
  }
  return Object.fromEntries(byThread);
}

export const pools = {
  create: (c: Clients, namespace: string, name: string, spec: Record<string, unknown>) =>
    c.custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: "sandboxpools",
      body: { apiVersion: `${GROUP}/${VERSION}`, kind: "SandboxPool", metadata: { name }, spec },
    }),
  get: (c: Clients, namespace: string, name: string) =>
    c.custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: "sandboxpools",
      name,
    }) as Promise<{
      spec: Record<string, unknown>;
      status?: { active?: number; warmReady?: number; evictions?: number };
    }>,
  /** Waits until the pool's status counts `count` ready warm pods. */
  waitWarm: (c: Clients, namespace: string, name: string, count: number, ms = 180_000) =>
    waitFor(`${count} warm pods of pool ${name} ready`, ms, async () => {
      const p = await pools.get(c, namespace, name);
      return (p.status?.warmReady ?? 0) >= count;
    }),
  /** Deletes the pool (its warm pods go with it); one already gone is fine. */
  delete: async (c: Clients, namespace: string, name: string) => {
    await c.custom
      .deleteNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: "sandboxpools",
        name,
      })
      .catch((err: unknown) => {
        if ((err as { code?: number }).code !== 404) throw err;
      });
  },
  patchSpec: (c: Clients, namespace: string, name: string, spec: Record<string, unknown>) =>
    c.custom.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace, plural: "sandboxpools", name, body: { spec } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    ),
};

export async function waitForPhase(
  c: Clients,
  ns: string,
  name: string,
  phase: string,
  timeoutMs = 90_000,
): Promise<SandboxObject> {
  return waitFor(`sandbox ${ns}/${name} ${phase}`, timeoutMs, async () => {
    const s = await sandboxes.get(c, ns, name);
    return s.status?.phase === phase ? s : undefined;
  });
}

export async function tokenOf(c: Clients, ns: string, name: string): Promise<string> {
  const secret = await c.core.readNamespacedSecret({ name: tokenSecretName(name), namespace: ns });
  return Buffer.from(secret.data!.token!, "base64").toString();
}

/**
 * The token a warm pod's sandboxd was started with, as the operator and the provisioner know it:
 * its own, derived from the namespace's token key and the pod's token id; for a pod without a
 * token id (made before warm tokens were per pod), its pool's Secret's.
 */
export async function warmTokenOfPod(
  c: Clients,
  ns: string,
  pod: {
    metadata?: {
      name?: string;
      labels?: Record<string, string>;
      annotations?: Record<string, string>;
    };
  },
): Promise<string> {
  const secret = async (name: string, key: string) => {
    const s = await c.core.readNamespacedSecret({ name, namespace: ns });
    return Buffer.from(s.data![key]!, "base64").toString();
  };
  const id = pod.metadata?.annotations?.[ANNOTATION.warmTokenId];
  if (!id) return secret(`${pod.metadata!.labels!["sandpit.dev/pool"]!}-warm-token`, "token");
  return warmPodToken(await secret(TOKEN_KEY_SECRET, "key"), ns, pod.metadata!.name!, id);
}

/**
 * Whether host:port accepts a TCP connection from here (the node) within 3 s: the control that
 * makes a sandbox's refusal to reach it the policy's doing.
 */
export function reachableFromNode(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: 3_000 });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("timeout", () => {
      socket.destroy();
      resolve(false);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Runs code through sandboxd at host:port (a pod endpoint or a Service address). */
export async function runCode(
  address: string,
  token: string,
  code: string,
  language = "python",
): Promise<{ success: boolean; stdout: string; stderr: string }> {
  const res = await fetch(`http://${address}/v1/code/execute`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ language, code }),
    signal: AbortSignal.timeout(30_000),
  });
  if (!res.ok) throw new Error(`sandboxd answered ${res.status}: ${await res.text()}`);
  return (await res.json()) as { success: boolean; stdout: string; stderr: string };
}

/** The children of a sandbox, by kind: what the operator made for it. */
export async function childrenOf(c: Clients, ns: string, sandbox: string) {
  const labelSelector = `sandpit.dev/sandbox=${sandbox}`;
  const [pods, services, claims, secrets, policies] = await Promise.all([
    c.core.listNamespacedPod({ namespace: ns, labelSelector }),
    c.core.listNamespacedService({ namespace: ns, labelSelector }),
    c.core.listNamespacedPersistentVolumeClaim({ namespace: ns, labelSelector }),
    c.core.listNamespacedSecret({ namespace: ns, labelSelector }),
    c.net.listNamespacedNetworkPolicy({ namespace: ns, labelSelector }),
  ]);
  return {
    pods: pods.items.filter((p) => !p.metadata?.deletionTimestamp),
    services: services.items,
    claims: claims.items.filter((p) => !p.metadata?.deletionTimestamp),
    secrets: secrets.items,
    policies: policies.items,
  };
}

export interface ProvisionerProcess {
  url: string;
  /** /metrics, on its own port. */
  metricsUrl: string;
  apiKey: string;
  logs: () => string;
  stop: () => Promise<void>;
  kill9: () => Promise<void>;
}

/**
 * The DeerFlow capability key of every provisioner the tests start (replicas of one namespace
 * must share it); a test derives a capability with it to prove what one does not open.
 */
export const CAPABILITY_KEY = "test-capability-key-of-the-cluster-suites";

interface ProvisionerOptions {
  kubeconfig: string;
  namespace: string;
  keys?: {
    key: string;
    tenant: string;
    maxSandboxes?: number;
    maxResources?: Record<string, string>;
  }[];
  env?: Record<string, string>;
}

/** Starts the provisioner out of cluster for `namespace`, with one API key of its own. */
export function startProvisioner(o: ProvisionerOptions): Promise<ProvisionerProcess> {
  return onFreePorts(() => startProvisionerOnce(o));
}

async function startProvisionerOnce(o: ProvisionerOptions): Promise<ProvisionerProcess> {
  const port = await freePort();
  const metricsPort = await freePort();
  const apiKey =
    `test-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`.padEnd(
      32,
      "x",
    );
  const keys = o.keys ?? [{ key: apiKey, tenant: "tests", maxSandboxes: 200 }];
  const url = `http://127.0.0.1:${port}`;
  const service = await spawnService(
    "provisioner",
    "provisioner/src/main.ts",
    {
      SANDPIT_KUBECONFIG: o.kubeconfig,
      SANDPIT_NAMESPACE: o.namespace,
      SANDPIT_LISTEN: `127.0.0.1:${port}`,
      SANDPIT_METRICS_LISTEN: `127.0.0.1:${metricsPort}`,
      SANDPIT_API_KEYS: JSON.stringify(keys),
      SANDPIT_LOG_LEVEL: "info",
      // No Service in front of it: nothing to wait for on SIGTERM.
      SANDPIT_SHUTDOWN_DELAY_MS: "0",
      SANDPIT_CAPABILITY_KEY: CAPABILITY_KEY,
      ...o.env,
    },
    `${url}/readyz`,
  );
  return {
    ...service,
    url,
    metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
    apiKey: keys[0]!.key,
  };
}

/** A namespace of its own with the real operator and provisioner on it: what provisioner suites need. */
export interface Stack {
  c: Clients;
  ns: string;
  operator: OperatorProcess;
  prov: ProvisionerProcess;
  /** Stops the provisioner and the operator, then deletes the namespace. */
  stop: () => Promise<void>;
}

export async function startStack(o: {
  kubeconfig: string;
  image: string;
  /** The namespace's prefix. */
  prefix: string;
  keys?: {
    key: string;
    tenant: string;
    maxSandboxes?: number;
    maxResources?: Record<string, string>;
  }[];
  /** The provisioner's settings besides the harness's. */
  env?: Record<string, string>;
  /**
   * Runs once the operator is up and before the provisioner starts: what the provisioner must
   * find at its start (its default pool, whose warm pods it reserves from the start).
   */
  beforeProvisioner?: (c: Clients, ns: string) => Promise<void>;
}): Promise<Stack> {
  const c = clients(o.kubeconfig);
  await ensureCrds(c);
  const ns = await createNamespace(c, o.prefix);
  const operator = await startOperator({ kubeconfig: o.kubeconfig, namespace: ns, image: o.image });
  if (o.beforeProvisioner) {
    await o.beforeProvisioner(c, ns).catch(async (err: unknown) => {
      await operator.stop();
      await deleteNamespace(c, ns);
      throw err;
    });
  }
  const prov = await startProvisioner({
    kubeconfig: o.kubeconfig,
    namespace: ns,
    ...(o.keys ? { keys: o.keys } : {}),
    ...(o.env ? { env: o.env } : {}),
  }).catch(async (err: unknown) => {
    await operator.stop();
    await deleteNamespace(c, ns);
    throw err;
  });
  return {
    c,
    ns,
    operator,
    prov,
    stop: async () => {
      await prov.stop();
      await operator.stop();
      await deleteNamespace(c, ns);
    },
  };
}

/** One call to a provisioner's API with `Authorization: Bearer <key>`; the answer parsed if JSON. */
export type ProvisionerApi = (
  method: string,
  path: string,
  key: string | undefined,
  body?: unknown,
  headers?: Record<string, string>,
) => Promise<{ status: number; json: any; headers: Headers }>; // eslint-disable-line @typescript-eslint/no-explicit-any -- API answers of several shapes

export async function provisionerCall(
  baseUrl: string,
  ...[method, path, key, body, headers = {}]: Parameters<ProvisionerApi>
): ReturnType<ProvisionerApi> {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
      ...headers,
    },
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
    signal: AbortSignal.timeout(180_000),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json, headers: res.headers };
}

/** Creates a PersistentVolumeClaim of the cluster's default class. */
export async function createClaim(c: Clients, ns: string, name: string, size = "64Mi") {
  await c.core.createNamespacedPersistentVolumeClaim({
    namespace: ns,
    body: {
      metadata: { name },
      spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: size } } },
    },
  });
}

/**
 * Runs `script` (sh) to completion in a pod of `image` with `claim` at /claim, as the sandbox's
 * uid and gid 1000, and returns its output: another process writing into or reading from a
 * claim the sandboxes mount.
 */
export async function runInClaim(
  c: Clients,
  ns: string,
  o: { claim: string; image: string; script: string },
): Promise<string> {
  const name = `claim-job-${Math.random().toString(36).slice(2, 8)}`;
  await c.core.createNamespacedPod({
    namespace: ns,
    body: {
      metadata: { name },
      spec: {
        restartPolicy: "Never",
        securityContext: {
          runAsNonRoot: true,
          runAsUser: 1000,
          runAsGroup: 1000,
          fsGroup: 1000,
          seccompProfile: { type: "RuntimeDefault" },
        },
        containers: [
          {
            name: "job",
            image: o.image,
            imagePullPolicy: "IfNotPresent",
            command: ["sh", "-c", o.script],
            securityContext: {
              allowPrivilegeEscalation: false,
              capabilities: { drop: ["ALL"] },
            },
            volumeMounts: [{ name: "claim", mountPath: "/claim" }],
          },
        ],
        volumes: [{ name: "claim", persistentVolumeClaim: { claimName: o.claim } }],
      },
    },
  });
  const phase = await waitFor(`pod ${name} to finish`, 120_000, async () => {
    const p = await c.core.readNamespacedPod({ name, namespace: ns });
    return p.status?.phase === "Succeeded" || p.status?.phase === "Failed"
      ? p.status.phase
      : undefined;
  });
  const logs = await c.core.readNamespacedPodLog({ name, namespace: ns });
  await c.core.deleteNamespacedPod({ name, namespace: ns, gracePeriodSeconds: 0 });
  if (phase !== "Succeeded") throw new Error(`pod ${name} failed: ${logs}`);
  return logs;
}
