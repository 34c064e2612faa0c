/**
 * The Helm chart (charts/sandpit), with the Helm that test/cluster/build.sh builds, on the real
 * cluster:
 *  - `helm lint --strict` is clean; values.schema.json refuses mistyped, misspelt and
 *    inconsistent values with their path; every pod the chart renders meets the restricted Pod
 *    Security Standard, and nothing is exposed beyond a ClusterIP unless asked (the E2B example's
 *    Ingress: api.<domain> and *.<domain>, TLS at the ingress);
 *  - installed from the operator, provisioner and sandbox images built here: the operator's two
 *    replicas run and one holds the Lease, the provisioner answers through its Service with the
 *    API key the chart generated, and a sandbox created through it runs Python and TypeScript;
 *  - `helm upgrade` rolls both Deployments and keeps the generated keys (the API key and the E2B
 *    token key) and the sandbox;
 *  - a real Prometheus (Debian's, a host process) scrapes both components straight at their
 *    pods' addresses and loads the chart's rules (rules/sandpit.rules.yaml as the release renders
 *    them): every target is up, every recording rule and alert evaluates without error, and so
 *    does every query of the dashboard the release ships in a ConfigMap for Grafana's sidecar;
 *  - `helm uninstall` leaves the CRDs, the sandboxes' namespace and its Sandbox in place.
 *
 * The release watches its own sandbox namespace only (operator.watchNamespace), so it never
 * competes with the operators other suites run at the same time.
 */
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import {
  ApiextensionsV1Api,
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  EventsV1Api,
  KubeConfig,
  type V1PodSpec as PodSpec,
} from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { createProvider } from "@sandpit/sdk";
import { reachableFromNode, waitFor } from "../cluster/harness.ts";
import {
  DASHBOARD,
  dashboardQueries,
  ensurePrometheus,
  query,
  renderRules,
  startPrometheus,
  substitute,
} from "../monitoring/prometheus.ts";
import { type FakeInternet, startFakeInternet } from "../security/fake-internet.ts";
import { CHART, clusterBin, helmRunner, releaseValues as releaseValuesFor } from "./release.ts";

const log = (line: string) => process.stderr.write(`[chart] ${line}\n`);

const kubeconfig = inject("kubeconfig");
const kc = new KubeConfig();
kc.loadFromFile(kubeconfig);
const core = kc.makeApiClient(CoreV1Api);
const apps = kc.makeApiClient(AppsV1Api);
const leases = kc.makeApiClient(CoordinationV1Api);
const custom = kc.makeApiClient(CustomObjectsApi);
const events = kc.makeApiClient(EventsV1Api);
const extensions = kc.makeApiClient(ApiextensionsV1Api);

const id = randomBytes(3).toString("hex");
const release = `sp-${id}`;
const systemNs = `sandpit-chart-${id}`;
const sandboxNs = `sandpit-chart-sbx-${id}`;
const fullname = `${release}-sandpit`;

let helm: (...args: string[]) => Promise<string>;
let installed = false;

const releaseValues = () =>
  releaseValuesFor(
    {
      operator: inject("clusterOperatorImage"),
      provisioner: inject("clusterProvisionerImage"),
      egress: inject("clusterEgressImage"),
      sandbox: inject("clusterSandboxImage"),
    },
    sandboxNs,
  );

/** What this suite's release turns on beyond the shared values: the Grafana dashboard. */
const monitoringValues = ["--set", "metrics.dashboard.enabled=true"];

type Doc = {
  kind: string;
  metadata: { name: string; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
  rules?: { verbs: string[]; resources: string[] }[];
};

async function render(...args: string[]): Promise<Doc[]> {
  const text = await helm("template", release, CHART, "-n", systemNs, ...args);
  return parseAllDocuments(text)
    .map((d) => d.toJS() as Doc | null)
    .filter((d): d is Doc => d !== null);
}

async function apiKey(): Promise<string> {
  const secret = await core.readNamespacedSecret({
    name: `${fullname}-api-keys`,
    namespace: systemNs,
  });
  const keys = JSON.parse(Buffer.from(secret.data!["api-keys.json"]!, "base64").toString()) as {
    key: string;
  }[];
  return keys[0]!.key;
}

async function provisionerUrl(): Promise<string> {
  const svc = await core.readNamespacedService({
    name: `${fullname}-provisioner`,
    namespace: systemNs,
  });
  return `http://${svc.spec!.clusterIP}:${svc.spec!.ports![0]!.port}`;
}

/**
 * The Service's address once it routes: ready pods reach the Service's endpoints, and every
 * node's proxy its rules, a moment after the Deployment reports them ready.
 */
async function routedProvisionerUrl(): Promise<string> {
  const url = await provisionerUrl();
  await waitFor(`the provisioner Service at ${url} answering`, 120_000, async () => {
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2_000) });
      if (res.status !== 200) return undefined;
    }
    return true;
  });
  return url;
}

/** Polls `url` every 200 ms until stopped; resolves with the polls that failed. */
function pollWhile(url: string): { stop: () => Promise<string[]> } {
  const failures: string[] = [];
  let running = true;
  const loop = (async () => {
    const until = Date.now() + 600_000;
    while (running && Date.now() < until) {
      const at = new Date().toISOString();
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
        await res.text();
        if (res.status !== 200) failures.push(`${at} ${res.status}`);
      } catch (err) {
        const cause = (err as { cause?: { code?: string; message?: string } }).cause;
        failures.push(`${at} ${String(err)} ${cause?.code ?? cause?.message ?? ""}`);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return failures;
    },
  };
}

async function deploymentRolled(name: string, replicas: number) {
  return waitFor(`deployment ${name}: ${replicas} updated, ready replicas`, 240_000, async () => {
    const d = await apps.readNamespacedDeployment({ name, namespace: systemNs });
    const s = d.status;
    return s?.observedGeneration === d.metadata?.generation &&
      s?.updatedReplicas === replicas &&
      s?.readyReplicas === replicas &&
      (s?.replicas ?? 0) === replicas
      ? d
      : undefined;
  });
}

async function podLogs(component: string, tail = 200): Promise<string> {
  const pods = await core.listNamespacedPod({
    namespace: systemNs,
    labelSelector: `app.kubernetes.io/name=sandpit-${component}`,
  });
  const out: string[] = [];
  for (const p of pods.items) {
    const text = await core
      .readNamespacedPodLog({ name: p.metadata!.name!, namespace: systemNs, tailLines: tail })
      .catch((err: unknown) => `(no log: ${String(err)})`);
    out.push(`--- ${p.metadata!.name}\n${text}`);
  }
  return out.join("\n");
}

beforeAll(async () => {
  helm = helmRunner(await clusterBin(), kubeconfig, id);
});

afterAll(async () => {
  if (installed) await helm("uninstall", release, "-n", systemNs, "--wait").catch(() => undefined);
  for (const name of [sandboxNs, systemNs]) {
    await core.deleteNamespace({ name }).catch(() => undefined);
  }
  for (const name of [sandboxNs, systemNs]) {
    await waitFor(`namespace ${name} gone`, 180_000, async () =>
      (await core.readNamespace({ name }).then(
        () => false,
        () => true,
      ))
        ? true
        : undefined,
    ).catch((err: unknown) => log(String(err)));
  }
}, 400_000);

describe("the chart, offline", () => {
  it("passes helm lint --strict, with the defaults and with every option set", async () => {
    await helm("lint", "--strict", CHART);
    await helm(
      "lint",
      "--strict",
      CHART,
      "--set-json",
      'provisioner.apiKeys=[{"key":"0123456789abcdef0123456789","tenant":"acme","maxSandboxes":5}]',
      "--set",
      "provisioner.defaultPool=default,provisioner.publicUrl=https://sandpit.example.com",
      "--set",
      "operator.watchNamespace=sandpit-sandboxes,operator.replicas=1",
      "--set-json",
      'sandboxes.tolerations=[{"key":"sandbox","operator":"Exists","effect":"NoSchedule"}]',
      "--set",
      "metrics.dashboard.enabled=true",
    );
  });

  it.each([
    [["--set", "operator.replicas=two"], /operator\.replicas|replicas/],
    [["--set", "operater.replicas=2"], /operater/],
    [["--set-json", 'provisioner.apiKeys=[{"key":"short","tenant":"a"}]'], /key/],
    [["--set", "provisioner.service.type=Ingress"], /service\.type|type/],
    [["--set", "sandboxes.namespace=Not_A_Name"], /namespace/],
    [["--set", "operator.watchNamespace=elsewhere"], /watchNamespace/],
    [["--set", "metrics.serviceMonitor.enabled=true"], /ServiceMonitor/],
    [["--set", "metrics.prometheusRule.enabled=true"], /PrometheusRule CRD/],
    [["--set", "metrics.prometheusRule.thresholds.poolActiveRatio=2"], /poolActiveRatio/],
    [["--set", "provisioner.e2b.domain=Not_A_Domain"], /e2b\/domain|domain/],
    [["--set", "provisioner.ingress.enabled=true"], /needs provisioner\.ingress\.host or/],
    [
      ["--set", "provisioner.ingress.enabled=true,provisioner.ingress.host=sandpit.example.com"],
      /ingress\.host needs provisioner\.publicUrl/,
    ],
  ])("refuses bad values %j with a message naming them", async (args, message) => {
    const err = await render(...(args as string[])).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err, "helm template accepted the values").toBeInstanceOf(Error);
    expect(err!.message).toMatch(message);
  });

  it("builds handed-out URLs from publicUrl or the Service, and serves /metrics on a port of its own", async () => {
    const env = async (...args: string[]) => {
      const docs = await render(...args);
      const d = docs.find(
        (x) => x.kind === "Deployment" && x.metadata.name.endsWith("-provisioner"),
      );
      const pod = (d!.spec as { template: { spec: PodSpec } }).template.spec;
      const vars = Object.fromEntries(pod.containers[0]!.env!.map((e) => [e.name, e.value]));
      return { docs, vars, ports: pod.containers[0]!.ports! };
    };
    // Never the Host header: without publicUrl, the Service's own cluster address.
    const plain = await env();
    expect(plain.vars.SANDPIT_PUBLIC_URL).toBe(`http://${fullname}-provisioner.${systemNs}.svc`);
    expect((await env("--set", "provisioner.service.port=8080")).vars.SANDPIT_PUBLIC_URL).toBe(
      `http://${fullname}-provisioner.${systemNs}.svc:8080`,
    );
    expect(
      (await env("--set", "provisioner.publicUrl=https://sandpit.example.com")).vars
        .SANDPIT_PUBLIC_URL,
    ).toBe("https://sandpit.example.com");
    // /metrics: its own container port and Service; the API's Service (an Ingress's backend) lacks it.
    expect(plain.vars.SANDPIT_METRICS_LISTEN).toBe("0.0.0.0:9090");
    expect(plain.ports.map((p) => p.name)).toEqual(["http", "metrics"]);
    const services = plain.docs.filter((x) => x.kind === "Service");
    const api = services.find((x) => x.metadata.name === `${fullname}-provisioner`)!;
    const metrics = services.find((x) => x.metadata.name === `${fullname}-provisioner-metrics`)!;
    const portsOf = (x: Doc) =>
      (x.spec as { ports: { name: string; targetPort: string }[] }).ports.map((p) => p.targetPort);
    expect(portsOf(api)).toEqual(["http"]);
    expect(portsOf(metrics)).toEqual(["metrics"]);
  });

  it("renders restricted pods, least-privilege RBAC, ClusterIP services and kept CRDs", async () => {
    const docs = await render();
    const byKind = (kind: string) => docs.filter((d) => d.kind === kind);
    expect(byKind("Deployment").map((d) => d.metadata.name)).toEqual([
      `${fullname}-egress`,
      `${fullname}-operator`,
      `${fullname}-provisioner`,
    ]);
    for (const d of byKind("Deployment")) {
      const pod = (d.spec as { template: { spec: PodSpec } }).template.spec;
      expect(pod.securityContext).toMatchObject({
        runAsNonRoot: true,
        seccompProfile: { type: "RuntimeDefault" },
      });
      for (const c of pod.containers) {
        expect(c.securityContext).toEqual({
          allowPrivilegeEscalation: false,
          readOnlyRootFilesystem: true,
          capabilities: { drop: ["ALL"] },
        });
        expect(c.resources?.limits).toBeDefined();
        expect(c.livenessProbe && c.readinessProbe).toBeTruthy();
      }
    }
    for (const s of byKind("Service")) expect(s.spec!.type).toBe("ClusterIP");
    for (const r of [...byKind("ClusterRole"), ...byKind("Role")]) {
      for (const rule of r.rules!) {
        expect(rule.verbs).not.toContain("*");
        expect(rule.resources).not.toContain("*");
      }
    }
    const crds = byKind("CustomResourceDefinition");
    expect(crds.map((c) => c.metadata.name).sort()).toEqual([
      "sandboxes.sandpit.dev",
      "sandboxpools.sandpit.dev",
    ]);
    for (const c of crds) expect(c.metadata.annotations?.["helm.sh/resource-policy"]).toBe("keep");
    expect(byKind("PodDisruptionBudget")).toHaveLength(3);
    expect(await render("--set", "crds.install=false")).not.toContainEqual(
      expect.objectContaining({ kind: "CustomResourceDefinition" }),
    );
  });

  it("runs the egress proxy read-only and tells the operator its Service; without it, neither", async () => {
    const docs = await render();
    const operatorEnv = (all: Doc[]) => {
      const d = all.find((x) => x.kind === "Deployment" && x.metadata.name.endsWith("-operator"));
      return (d!.spec as { template: { spec: PodSpec } }).template.spec.containers[0]!.env!;
    };
    expect(operatorEnv(docs).find((e) => e.name === "SANDPIT_EGRESS_PROXY")?.value).toBe(
      `${fullname}-egress.${systemNs}.svc:3128`,
    );
    const role = docs.find(
      (d) => d.kind === "ClusterRole" && d.metadata.name === `${fullname}-egress`,
    );
    for (const rule of role!.rules!) expect(rule.verbs).toEqual(["get", "list", "watch"]);
    const service = docs.find(
      (d) => d.kind === "Service" && d.metadata.name === `${fullname}-egress`,
    );
    expect(service!.spec!.selector).toMatchObject({ "app.kubernetes.io/name": "sandpit-egress" });
    const off = await render("--set", "egressProxy.enabled=false");
    expect(off.filter((d) => d.metadata.name.startsWith(`${fullname}-egress`))).toEqual([]);
    expect(operatorEnv(off).find((e) => e.name === "SANDPIT_EGRESS_PROXY")).toBeUndefined();
  });

  it("tells the operator which StorageClasses enforce sizes, and lets it read them", async () => {
    const operatorEnv = (docs: Doc[]) => {
      const d = docs.find((x) => x.kind === "Deployment" && x.metadata.name.endsWith("-operator"));
      const env = (d!.spec as { template: { spec: PodSpec } }).template.spec.containers[0]!.env!;
      return env.find((e) => e.name === "SANDPIT_CAPACITY_ENFORCING_CLASSES")?.value;
    };
    const docs = await render(
      "--set-json",
      'sandboxes.capacityEnforcingClasses=["fast","ebs-gp3"]',
    );
    expect(operatorEnv(docs)).toBe("fast,ebs-gp3");
    expect(operatorEnv(await render())).toBeUndefined();
    const reads = docs
      .filter((d) => d.kind === "ClusterRole")
      .flatMap((r) => r.rules!)
      .find((rule) => rule.resources?.includes("storageclasses"));
    expect(reads).toEqual({
      apiGroups: ["storage.k8s.io"],
      resources: ["storageclasses"],
      verbs: ["get", "list", "watch"],
    });
    await expect(
      render("--set-json", 'sandboxes.capacityEnforcingClasses=["Not A Class"]'),
    ).rejects.toThrow(/capacityEnforcingClasses/);
  });

  it("renders the sandboxes' resource bounds: the same on both components, a LimitRange and a ResourceQuota as the backstop", async () => {
    const docs = await render("--set", "sandboxes.bounds.max.memory=2Gi");
    const envOf = (component: string) => {
      const d = docs.find((x) => x.kind === "Deployment" && x.metadata.name.endsWith(component));
      const env = (d!.spec as { template: { spec: PodSpec } }).template.spec.containers[0]!.env!;
      return Object.fromEntries(
        env
          .filter((e) => /^SANDPIT_M(IN|AX)_/.test(e.name) && e.name !== "SANDPIT_MAX_BODY_BYTES")
          .map((e) => [e.name, e.value]),
      );
    };
    expect(envOf("-operator")).toEqual({
      SANDPIT_MIN_CPU: "10m",
      SANDPIT_MIN_MEMORY: "16Mi",
      SANDPIT_MIN_EPHEMERAL_STORAGE: "16Mi",
      SANDPIT_MIN_DISK: "16Mi",
      SANDPIT_MAX_CPU: "4",
      SANDPIT_MAX_MEMORY: "2Gi",
      SANDPIT_MAX_EPHEMERAL_STORAGE: "8Gi",
      SANDPIT_MAX_DISK: "4Gi",
    });
    expect(envOf("-provisioner")).toEqual(envOf("-operator"));
    const range = docs.find((d) => d.kind === "LimitRange");
    expect(range?.metadata).toMatchObject({ namespace: "sandpit-sandboxes" });
    expect((range!.spec as { limits: unknown[] }).limits).toEqual([
      expect.objectContaining({
        type: "Container",
        min: { cpu: "10m", memory: "16Mi", "ephemeral-storage": "16Mi" },
        max: { cpu: "4", memory: "2Gi", "ephemeral-storage": "8Gi" },
      }),
    ]);
    const quota = docs.find((d) => d.kind === "ResourceQuota");
    expect((quota!.spec as { hard: Record<string, string> }).hard).toMatchObject({
      pods: "500",
      "limits.cpu": "500",
    });
    const off = await render(
      "--set",
      "sandboxes.limitRange.enabled=false,sandboxes.resourceQuota.enabled=false",
    );
    expect(off.filter((d) => d.kind === "LimitRange" || d.kind === "ResourceQuota")).toEqual([]);
    // A zero bound would mean no limit: the values' schema refuses it.
    await expect(render("--set-string", "sandboxes.bounds.max.memory=0")).rejects.toThrow(
      /bounds\/max\/memory/,
    );
  });

  it("renders the E2B example: api.<domain> and *.<domain> on an Ingress with TLS", async () => {
    const docs = await render("-f", `${CHART}/examples/e2b-ingress.yaml`);
    const ingress = docs.find((d) => d.kind === "Ingress") as unknown as {
      spec: {
        ingressClassName: string;
        tls: { secretName: string; hosts: string[] }[];
        rules: { host: string; http: { paths: { backend: { service: { name: string } } }[] } }[];
      };
    };
    const hosts = ["sandpit.example.com", "api.sandboxes.example.com", "*.sandboxes.example.com"];
    expect(ingress.spec.rules.map((r) => r.host)).toEqual(hosts);
    expect(ingress.spec.tls).toEqual([{ secretName: "sandboxes-example-com-wildcard", hosts }]);
    for (const r of ingress.spec.rules)
      expect(r.http.paths[0]!.backend.service.name).toBe(`${fullname}-provisioner`);
    const prov = docs.find(
      (d) => d.metadata.name === `${fullname}-provisioner` && d.kind === "Deployment",
    );
    const env = (prov!.spec as { template: { spec: PodSpec } }).template.spec.containers[0]!.env!;
    expect(env).toContainEqual({ name: "SANDPIT_E2B_DOMAIN", value: "sandboxes.example.com" });
    expect(env).toContainEqual({
      name: "SANDPIT_E2B_TOKEN_SECRET",
      valueFrom: { secretKeyRef: { name: `${fullname}-e2b`, key: "token-secret" } },
    });
    expect(docs.some((d) => d.kind === "Secret" && d.metadata.name === `${fullname}-e2b`)).toBe(
      true,
    );
    // The DeerFlow capability key: always, from a Secret of its own.
    expect(env).toContainEqual({
      name: "SANDPIT_CAPABILITY_KEY",
      valueFrom: { secretKeyRef: { name: `${fullname}-capability`, key: "capability-key" } },
    });
    // Off by default: no Ingress; and with e2b off, neither its Secret nor its settings.
    expect((await render()).some((d) => d.kind === "Ingress")).toBe(false);
    const off = await render("--set", "provisioner.e2b.enabled=false");
    expect(off.some((d) => d.metadata.name === `${fullname}-e2b`)).toBe(false);
  });

  it("renders the Traefik variant of the E2B example: the same hosts and TLS, Traefik's annotations", async () => {
    const docs = await render("-f", `${CHART}/examples/e2b-ingress-traefik.yaml`);
    const ingress = docs.find((d) => d.kind === "Ingress") as unknown as {
      metadata: { annotations: Record<string, string> };
      spec: { ingressClassName: string; tls: unknown[]; rules: { host: string }[] };
    };
    const hosts = ["sandpit.example.com", "api.sandboxes.example.com", "*.sandboxes.example.com"];
    expect(ingress.spec.ingressClassName).toBe("traefik");
    expect(ingress.spec.rules.map((r) => r.host)).toEqual(hosts);
    expect(ingress.spec.tls).toEqual([{ secretName: "sandboxes-example-com-wildcard", hosts }]);
    expect(ingress.metadata.annotations).toEqual({
      "traefik.ingress.kubernetes.io/router.entrypoints": "websecure",
      "traefik.ingress.kubernetes.io/router.tls": "true",
    });
  });
});

async function secretOf(suffix: string, key: string): Promise<string> {
  const name = `${fullname}-${suffix}`;
  const secret = await core.readNamespacedSecret({ name, namespace: systemNs });
  return Buffer.from(secret.data![key]!, "base64").toString();
}
const e2bSecret = () => secretOf("e2b", "token-secret");
const capabilityKey = () => secretOf("capability", "capability-key");

describe("the chart on the cluster", () => {
  let keyBefore: string;
  let e2bBefore: string;
  let capabilityBefore: string;
  let sandboxId: string;
  /** The release's egress proxy knows the test's "internet" under these names. */
  let internet: FakeInternet | undefined;
  const nonce = `chart-internet-${id}`;

  beforeAll(async () => {
    internet = await startFakeInternet({ nonce, ports: [80] });
  });
  afterAll(async () => {
    await internet?.stop();
  });
  const proxyValues = () => [
    "--set-json",
    `egressProxy.hostAliases=${JSON.stringify([
      { ip: internet!.addresses[0], hostnames: ["pkgs.chart.test", "denied.chart.test"] },
    ])}`,
  ];

  it("installs: the operator leads, the provisioner serves, a sandbox runs Python and TypeScript", async () => {
    const started = Date.now();
    // The CRDs may exist already (other suites apply crds/): the release takes them over.
    const notes = await helm(
      "install",
      release,
      CHART,
      "-n",
      systemNs,
      "--create-namespace",
      "--take-ownership",
      "--wait",
      "--timeout",
      "5m",
      ...releaseValues(),
      ...monitoringValues,
      ...proxyValues(),
    );
    installed = true;
    log(`installed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    expect(notes).toContain(`kubectl -n ${systemNs} port-forward service/${fullname}-provisioner`);

    await deploymentRolled(`${fullname}-operator`, 2);
    await deploymentRolled(`${fullname}-provisioner`, 2);
    await deploymentRolled(`${fullname}-egress`, 2);
    const pods = await core.listNamespacedPod({
      namespace: systemNs,
      labelSelector: "app.kubernetes.io/name=sandpit-operator",
    });
    const holder = await waitFor(
      "the operator's Lease held by one of its pods",
      120_000,
      async () => {
        const lease = await leases
          .readNamespacedLease({ name: `${fullname}-operator`, namespace: systemNs })
          .catch(() => undefined);
        const who = lease?.spec?.holderIdentity;
        return who && pods.items.some((p) => p.metadata!.name === who) ? who : undefined;
      },
    );
    log(`lease held by ${holder}`);

    keyBefore = await apiKey();
    expect(keyBefore).toMatch(/^sp_[A-Za-z0-9]{40}$/);
    const url = await routedProvisionerUrl();
    const health = await fetch(`${url}/healthz`);
    expect(health.status).toBe(200);
    const refused = await fetch(`${url}/v1/sandboxes`, {
      headers: { authorization: "Bearer not-a-key-not-a-key-not-a-key" },
    });
    expect(refused.status).toBe(401);
    // The E2B API is on, with the token key the chart generated.
    e2bBefore = await e2bSecret();
    expect(e2bBefore).toMatch(/^[A-Za-z0-9]{48}$/);
    capabilityBefore = await capabilityKey();
    expect(capabilityBefore).toMatch(/^[A-Za-z0-9]{48}$/);
    expect(capabilityBefore).not.toBe(e2bBefore);
    const e2bList = await fetch(`${url}/e2b/v2/sandboxes`, { headers: { "x-api-key": keyBefore } });
    expect(e2bList.status).toBe(200);

    const provider = createProvider({
      use: "kubernetes",
      kubernetes: { provisionerUrl: url, apiKey: keyBefore },
    });
    const sbx = await provider.create({ language: "python", threadId: `chart-${id}` });
    sandboxId = sbx.sandboxId;
    try {
      const py = await sbx.executeCode("print(6*7)", "python");
      expect(py.stdout.trim(), JSON.stringify(py)).toBe("42");
      const ts = await sbx.executeCode(
        "const n: number = 6 * 7;\nconsole.log(`ts ${n}`);",
        "typescript",
      );
      expect(ts.stdout.trim(), JSON.stringify(ts)).toBe("ts 42");
    } catch (err) {
      throw new Error(`${String(err)}\n${await podLogs("provisioner")}`, { cause: err });
    }
    const sandboxes = await custom.listNamespacedCustomObject({
      group: "sandpit.dev",
      version: "v1alpha1",
      namespace: sandboxNs,
      plural: "sandboxes",
    });
    expect((sandboxes as { items: unknown[] }).items).toHaveLength(1);

    // The ClusterRole (bound in the watched namespace) is enough: the operator recorded events
    // and was refused nothing.
    const recorded = await events.listNamespacedEvent({ namespace: sandboxNs });
    expect(recorded.items.some((e) => e.reportingController === "sandpit.dev/operator")).toBe(true);
    expect(await podLogs("operator", 1000)).not.toMatch(/forbidden/i);
    expect(await podLogs("provisioner", 1000)).not.toMatch(/forbidden/i);
  }, 600_000);

  it("confines a sandbox as installed: the provisioner reaches it, it reaches no component of the release nor another sandbox", async () => {
    // Every port of the release's own pods and Services: what code in a sandbox must not reach.
    const pods = await core.listNamespacedPod({ namespace: systemNs });
    const services = await core.listNamespacedService({ namespace: systemNs });
    const targets = [
      ...pods.items.flatMap((p) =>
        p.spec!.containers.flatMap((c) =>
          (c.ports ?? []).map((port) => ({
            what: `pod ${p.metadata!.name} port ${port.containerPort}`,
            host: p.status!.podIP!,
            port: port.containerPort,
          })),
        ),
      ),
      ...services.items.flatMap((svc) =>
        (svc.spec!.ports ?? []).map((port) => ({
          what: `Service ${svc.metadata!.name} port ${port.port}`,
          host: svc.spec!.clusterIP!,
          port: port.port,
        })),
      ),
    ].filter((t) => t.host && t.host !== "None");
    // Both components, API and metrics ports, by pod and by Service.
    expect(targets.length, JSON.stringify(targets)).toBeGreaterThanOrEqual(8);
    const provider = createProvider({
      use: "kubernetes",
      kubernetes: { provisionerUrl: await routedProvisionerUrl(), apiKey: await apiKey() },
    });
    // The first sandbox's pod, which another tenant's code must not reach either.
    const first = (await custom.getNamespacedCustomObject({
      group: "sandpit.dev",
      version: "v1alpha1",
      namespace: sandboxNs,
      plural: "sandboxes",
      name: sandboxId,
    })) as { status?: { endpoint?: string } };
    const [host, port] = first.status!.endpoint!.split(":");
    targets.push({ what: "the other sandbox's sandboxd", host: host!, port: Number(port) });
    // The provisioner reaches this sandbox (ingress from it is allowed): every call goes that way.
    const sbx = await provider.create({ language: "python", threadId: `chart-other-${id}` });
    try {
      const script = [
        "import json, socket",
        `targets = ${JSON.stringify(targets.map((t) => [t.what, t.host, t.port]))}`,
        "out = {}",
        "for what, host, port in targets:",
        "    s = socket.socket(); s.settimeout(3)",
        "    try:",
        "        s.connect((host, port)); out[what] = 'connected'",
        "    except Exception as e:",
        "        out[what] = type(e).__name__",
        "    finally:",
        "        s.close()",
        "print(json.dumps(out))",
      ].join("\n");
      const r = await sbx.executeCode(script, "python");
      expect(r.success, JSON.stringify(r)).toBe(true);
      const got = JSON.parse(r.stdout) as Record<string, string>;
      for (const t of targets) expect(got[t.what], t.what).not.toBe("connected");
      // The control: from the node, the same pods answer (so the refusals are the policy's).
      for (const t of targets.filter((t) => !t.what.startsWith("Service ")))
        await waitFor(
          `${t.what} from the node`,
          30_000,
          () => reachableFromNode(t.host, t.port),
          1_000,
        );
    } finally {
      await sbx.kill();
      await provider.close();
    }
  }, 300_000);

  it("lets a sandbox reach its allowed domains through the release's egress proxy, and no other", async () => {
    // A pool whose template lists one domain (the provisioner's tenants ask only for "deny";
    // domains are the platform's, set on a pool).
    await custom.createNamespacedCustomObject({
      group: "sandpit.dev",
      version: "v1alpha1",
      namespace: sandboxNs,
      plural: "sandboxpools",
      body: {
        apiVersion: "sandpit.dev/v1alpha1",
        kind: "SandboxPool",
        metadata: { name: "domains" },
        spec: {
          maxActive: 2,
          template: {
            language: "python",
            network: { egress: "Allowlist", allowDomains: ["pkgs.chart.test"] },
          },
        },
      },
    });
    const provider = createProvider({
      use: "kubernetes",
      kubernetes: { provisionerUrl: await routedProvisionerUrl(), apiKey: await apiKey() },
    });
    const sbx = await provider.create({
      language: "python",
      template: "domains",
      threadId: `chart-domains-${id}`,
    });
    try {
      const allowed = await sbx.commands.run("curl -sS --max-time 10 http://pkgs.chart.test/");
      expect(allowed.stdout, JSON.stringify(allowed)).toBe(nonce);
      const denied = await sbx.commands.run(
        "curl -sS --max-time 10 -w ' status=%{http_code}' http://denied.chart.test/",
      );
      expect(denied.stdout).toMatch(/denied\.chart\.test is not in the allowDomains of sandbox/);
      expect(denied.stdout).toContain("status=403");
      const direct = await sbx.commands.run(
        `curl -sS --noproxy '*' --max-time 5 http://${internet!.addresses[0]}/; echo " exit=$?"`,
      );
      expect(direct.stdout).not.toContain(nonce);
    } finally {
      await sbx.kill();
    }
    expect(await podLogs("egress", 1000)).not.toMatch(/forbidden/i);
  }, 300_000);

  it("is watched by a real Prometheus: both components' targets up, every rule and dashboard query evaluates", async () => {
    expect(installed, "needs the install above").toBe(true);
    await ensurePrometheus(log);
    const operatorJob = `${fullname}-operator-metrics`;
    const provisionerJob = `${fullname}-provisioner-metrics`;

    // The dashboard, for Grafana's sidecar: the chart's file as it is, labelled for the sidecar.
    const cm = await core.readNamespacedConfigMap({
      name: `${fullname}-dashboard`,
      namespace: systemNs,
    });
    expect(cm.metadata!.labels).toMatchObject({ grafana_dashboard: "1" });
    expect(JSON.parse(cm.data!["sandpit.json"]!)).toEqual(
      JSON.parse(await readFile(DASHBOARD, "utf8")),
    );

    // The pods, reached at their addresses from this host (ports as the chart names them).
    const targets = async (component: string, port: number) => {
      const pods = await core.listNamespacedPod({
        namespace: systemNs,
        labelSelector: `app.kubernetes.io/name=sandpit-${component}`,
      });
      const ips = pods.items
        .filter((p) => !p.metadata!.deletionTimestamp && p.status?.podIP)
        .map((p) => `${p.status!.podIP}:${port}`);
      expect(ips, `${component} pods with an address`).toHaveLength(2);
      return ips;
    };
    const scrape = (job: string, addresses: string[]) => ({
      job_name: job,
      static_configs: [{ targets: addresses, labels: { namespace: systemNs } }],
    });
    // JSON is YAML: the config as Prometheus reads it.
    const config = JSON.stringify({
      global: { scrape_interval: "2s", evaluation_interval: "2s", scrape_timeout: "2s" },
      rule_files: ["rules.yaml"],
      scrape_configs: [
        scrape(operatorJob, await targets("operator", 8081)),
        scrape(provisionerJob, await targets("provisioner", 9090)),
      ],
    });
    // The rules as this release renders them: their selectors name its two jobs.
    const rules = await renderRules(helm, release, systemNs);
    const prom = await startPrometheus({
      config,
      rules: JSON.stringify(rules),
      lifetimeMs: 300_000,
    });
    try {
      const api = async <T>(path: string): Promise<T> => {
        const res = await fetch(`${prom.url}${path}`, { signal: AbortSignal.timeout(5_000) });
        const body = (await res.json()) as { status: string; data: T };
        expect(body.status, path).toBe("success");
        return body.data;
      };
      type Target = { labels: { job: string }; health: string; lastError: string };
      const up = await waitFor("all four targets up", 60_000, async () => {
        const t = await api<{ activeTargets: Target[] }>("/api/v1/targets");
        return t.activeTargets.length === 4 && t.activeTargets.every((x) => x.health === "up")
          ? t.activeTargets
          : undefined;
      }).catch(async (err: unknown) => {
        const t = await api<{ activeTargets: Target[] }>("/api/v1/targets");
        throw new Error(`${String(err)}: ${JSON.stringify(t.activeTargets)}`, { cause: err });
      });
      expect(up.map((t) => t.labels.job).sort()).toEqual([
        operatorJob,
        operatorJob,
        provisionerJob,
        provisionerJob,
      ]);

      // Every rule evaluated, twice over, after the targets were up: health ok, no error.
      type Rule = {
        name: string;
        query: string;
        health: string;
        lastError?: string;
        lastEvaluation: string;
      };
      const since = Date.now();
      const loaded = await waitFor(
        "every rule evaluated after the targets were up",
        60_000,
        async () => {
          const d = await api<{ groups: { name: string; rules: Rule[] }[] }>("/api/v1/rules");
          const all = d.groups.flatMap((g) => g.rules);
          return all.length > 0 && all.every((r) => Date.parse(r.lastEvaluation) > since + 4_000)
            ? all
            : undefined;
        },
      );
      const expected = rules.groups.flatMap((g) => g.rules.map((r) => r.record ?? r.alert));
      expect(loaded.map((r) => r.name).sort()).toEqual(expected.sort());
      for (const r of loaded) {
        expect({ rule: r.name, health: r.health, error: r.lastError ?? "" }).toEqual({
          rule: r.name,
          health: "ok",
          error: "",
        });
      }
      // Each expression through the query API, as an operator's ad-hoc query would run it.
      for (const g of rules.groups) {
        for (const r of g.rules) {
          const q = await query(prom.url, r.expr);
          expect({ rule: r.record ?? r.alert, status: q.status, error: q.error }).toEqual({
            rule: r.record ?? r.alert,
            status: "success",
            error: undefined,
          });
        }
      }
      // What the cluster holds, through the new gauges and the counters: the install's one
      // sandbox, its start, one leader, the provisioner's create.
      const value = async (expr: string) => {
        const q = await query(prom.url, expr);
        expect(q.status, `${expr}: ${q.error}`).toBe("success");
        expect(q.data!.result, expr).toHaveLength(1);
        return Number(q.data!.result[0]!.value[1]);
      };
      expect(await value(`sum(sandpit:sandboxes:max{sandbox_namespace="${sandboxNs}"})`)).toBe(1);
      expect(
        await value(`sum(sandpit_sandbox_ready_seconds_count{job="${operatorJob}"})`),
      ).toBeGreaterThanOrEqual(1);
      expect(await value(`sum(leader_election_master_status{job="${operatorJob}"})`)).toBe(1);
      expect(
        await value(
          `sum(sandpit_provisioner_requests_total{job="${provisionerJob}", route="/v1/sandboxes", method="POST"})`,
        ),
      ).toBeGreaterThanOrEqual(1);
      // A healthy release raises nothing.
      const firing = await query(prom.url, 'ALERTS{alertstate="firing"}');
      expect(firing.data!.result).toEqual([]);

      // Every query of every dashboard panel, with Grafana's variables as it fills them in.
      const panels = await dashboardQueries();
      expect(panels.length).toBeGreaterThan(20);
      const vars = { operator: operatorJob, provisioner: provisionerJob };
      const empty: string[] = [];
      for (const p of panels) {
        const q = await query(prom.url, substitute(p.expr, vars));
        expect({ panel: p.panel, refId: p.refId, status: q.status, error: q.error }).toEqual({
          panel: p.panel,
          refId: p.refId,
          status: "success",
          error: undefined,
        });
        if (q.data!.result.length === 0) empty.push(`${p.panel} ${p.refId}`);
      }
      // Those over what every release has (no pools here, no 5xx) show data; the informers'
      // restart counters start at 0.
      for (const title of [
        "Sandboxes by phase A",
        "Reconciles by result A",
        "Work queue depth A",
        "Informer restarts A",
        "Replicas leading A",
        "Requests by code A",
        "Resident memory A",
        "Resident memory B",
      ])
        expect(empty, `${title} has data`).not.toContain(title);
    } catch (err) {
      throw new Error(`${String(err)}\n--- prometheus log\n${(await prom.log()).slice(-4000)}`, {
        cause: err,
      });
    } finally {
      await prom.stop();
    }
  }, 300_000);

  it("upgrades: both Deployments roll without refusing a request, the key and the sandbox stay", async () => {
    expect(installed, "needs the install above").toBe(true);
    const before = await apps.readNamespacedDeployment({
      name: `${fullname}-provisioner`,
      namespace: systemNs,
    });
    const url = await routedProvisionerUrl();
    const poll = pollWhile(`${url}/healthz`);
    await helm(
      "upgrade",
      release,
      CHART,
      "-n",
      systemNs,
      "--wait",
      "--timeout",
      "5m",
      ...releaseValues(),
      ...monitoringValues,
      ...proxyValues(),
      "--set",
      "operator.logLevel=debug,provisioner.logLevel=debug",
    );
    const history = await helm("history", release, "-n", systemNs, "-o", "json");
    expect((JSON.parse(history) as { revision: number }[]).map((r) => r.revision)).toEqual([1, 2]);
    const after = await deploymentRolled(`${fullname}-provisioner`, 2);
    await deploymentRolled(`${fullname}-operator`, 2);
    // The old pods drain (SANDPIT_SHUTDOWN_DELAY_MS) after the rollout counts them gone: the
    // Service is polled until the last of them has exited.
    await waitFor("the old provisioner pods gone", 120_000, async () => {
      const pods = await core.listNamespacedPod({
        namespace: systemNs,
        labelSelector: "app.kubernetes.io/name=sandpit-provisioner",
      });
      return pods.items.length === 2 && pods.items.every((p) => !p.metadata?.deletionTimestamp);
    });
    expect(await poll.stop(), "polls of the Service that failed during the upgrade").toEqual([]);
    expect(after.metadata!.generation).toBeGreaterThan(before.metadata!.generation!);
    const env = after.spec!.template.spec!.containers[0]!.env!;
    expect(env).toContainEqual({ name: "SANDPIT_LOG_LEVEL", value: "debug" });

    expect(await apiKey()).toBe(keyBefore);
    expect(await e2bSecret()).toBe(e2bBefore);
    expect(await capabilityKey()).toBe(capabilityBefore);
    const provider = createProvider({
      use: "kubernetes",
      kubernetes: { provisionerUrl: url, apiKey: keyBefore },
    });
    const again = await provider.create({ language: "python", threadId: `chart-${id}` });
    expect(again.sandboxId).toBe(sandboxId);
    expect((await again.commands.run("echo still here")).stdout).toBe("still here\n");
  }, 600_000);

  it("uninstalls, leaving the CRDs, the sandboxes' namespace and its Sandbox", async () => {
    expect(installed, "needs the install above").toBe(true);
    expect(sandboxId, "needs the sandbox the install made").toBeTruthy();
    await helm("uninstall", release, "-n", systemNs, "--wait", "--timeout", "3m");
    installed = false;
    await waitFor("the release's Deployments gone", 120_000, async () => {
      const list = await apps.listNamespacedDeployment({ namespace: systemNs });
      return list.items.length === 0 ? true : undefined;
    });
    for (const name of ["sandboxes.sandpit.dev", "sandboxpools.sandpit.dev"]) {
      const crd = await extensions.readCustomResourceDefinition({ name });
      expect(crd.metadata!.deletionTimestamp).toBeUndefined();
    }
    const ns = await core.readNamespace({ name: sandboxNs });
    expect(ns.metadata!.deletionTimestamp).toBeUndefined();
    const sbx = (await custom.getNamespacedCustomObject({
      group: "sandpit.dev",
      version: "v1alpha1",
      namespace: sandboxNs,
      plural: "sandboxes",
      name: sandboxId,
    })) as { metadata: { deletionTimestamp?: string } };
    expect(sbx.metadata.deletionTimestamp).toBeUndefined();
  }, 300_000);
});
