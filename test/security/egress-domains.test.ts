/**
 * Attack and use: `network.allowDomains` on the real cluster, with the operator's own
 * NetworkPolicies (kube-router enforcing them) and the egress proxy from its image, in a pod.
 * The "internet" is the test's own (fake-internet.ts): one public-range server the proxy
 * knows under several names (the proxy pod's hostAliases, as the chart's egressProxy.hostAliases
 * sets them), serving a package index for pip and a registry for npm.
 *
 * A sandbox allowed `pkgs.allowed.test` and `*.wild.test`:
 * - pip and npm install from the allowed name (the sandbox's environment leads them to the
 *   proxy); curl reaches it by plain HTTP and through a CONNECT tunnel;
 * - the same server under a name not allowed, a wildcard's bare domain, or its address, is
 *   refused; so is an allowed name that resolves to the node's address;
 * - the server is not reachable directly (no policy opens it), and no name resolves (no DNS);
 * - another sandbox's allowance is its own: a sandbox allowed only `*.wild.test` is refused
 *   `pkgs.allowed.test`; a sandbox without domains cannot reach the proxy at all;
 * - a warm pool whose template lists domains installs the template's packages through them,
 *   and a sandbox adopted from it reaches them too.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type Clients,
  type OperatorProcess,
  clients,
  createNamespace,
  deleteNamespace,
  ensureCrds,
  pools,
  runCode,
  sandboxes,
  startOperator,
  tokenOf,
  waitFor,
} from "../cluster/harness.ts";
import { machineAddressCidrs } from "../cluster/addresses.ts";
import { type FakeInternet, startFakeInternet } from "./fake-internet.ts";

const rand = Math.random().toString(36).slice(2, 7);
const NONCE = `egress-domains-${rand}`;
const CLUSTER_ROLE = `sandpit-egress-test-${rand}`;
const ALLOWED = ["pkgs.allowed.test", "*.wild.test", "node.allowed.test"];

let c: Clients;
let ns: string;
let operator: OperatorProcess | undefined;
let internet: FakeInternet | undefined;
let files: string;
let proxyAddress = "";
let nodeIp = "";

/** A wheel of `sandpit-demo` 1.0 and an npm tarball of `sandpit-demo` 1.0.0, served as files. */
function packageFiles(root: string, host: string) {
  mkdirSync(join(root, "simple/sandpit-demo"), { recursive: true });
  mkdirSync(join(root, "files"), { recursive: true });
  const wheel = "sandpit_demo-1.0-py3-none-any.whl";
  execFileSync("python3", [
    "-c",
    `
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("sandpit_demo/__init__.py", "ORIGIN = 'the test internet'\\n")
    z.writestr("sandpit_demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: sandpit-demo\\nVersion: 1.0\\n")
    z.writestr("sandpit_demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
    z.writestr("sandpit_demo-1.0.dist-info/RECORD", "")
`,
    join(root, "files", wheel),
  ]);
  writeFileSync(
    join(root, "simple/sandpit-demo/index.html"),
    `<html><body><a href="/files/${wheel}">${wheel}</a></body></html>`,
  );
  const pkg = mkdtempSync(join(tmpdir(), "sandpit-npm-"));
  mkdirSync(join(pkg, "package"));
  writeFileSync(
    join(pkg, "package/package.json"),
    JSON.stringify({ name: "sandpit-demo", version: "1.0.0", main: "index.js" }),
  );
  writeFileSync(join(pkg, "package/index.js"), "module.exports = 'the test internet';\n");
  execFileSync("tar", ["czf", join(root, "files/sandpit-demo-1.0.0.tgz"), "-C", pkg, "package"]);
  rmSync(pkg, { recursive: true, force: true });
  writeFileSync(
    join(root, "sandpit-demo"),
    JSON.stringify({
      name: "sandpit-demo",
      "dist-tags": { latest: "1.0.0" },
      versions: {
        "1.0.0": {
          name: "sandpit-demo",
          version: "1.0.0",
          main: "index.js",
          dist: { tarball: `http://${host}/files/sandpit-demo-1.0.0.tgz` },
        },
      },
    }),
  );
}

/** Runs a shell command in a sandbox (through its code runner); its exit code and output. */
async function sh(sandbox: string, command: string): Promise<{ code: number; out: string }> {
  const s = await sandboxes.get(c, ns, sandbox);
  const token = await tokenOf(c, ns, sandbox);
  const r = await runCode(
    s.status!.endpoint!,
    token,
    `
import json, subprocess
p = subprocess.run(["bash", "-c", ${JSON.stringify(command)}], capture_output=True, text=True, timeout=90)
print(json.dumps({"code": p.returncode, "out": p.stdout + p.stderr}))
`,
  );
  expect(r.success, r.stderr).toBe(true);
  return JSON.parse(r.stdout) as { code: number; out: string };
}

const ready = (name: string) =>
  waitFor(`sandbox ${name} Ready`, 240_000, async () => {
    const s = await sandboxes.get(c, ns, name);
    if (s.status?.phase === "Failed")
      throw new Error(`${name} failed: ${JSON.stringify(s.status)}`);
    return s.status?.phase === "Ready";
  });

beforeAll(async () => {
  c = clients(inject("kubeconfig"));
  await ensureCrds(c);
  files = mkdtempSync(join(tmpdir(), "sandpit-internet-"));
  packageFiles(files, "pkgs.allowed.test");
  internet = await startFakeInternet({ nonce: NONCE, ports: [80], root: files });
  const server = internet.addresses[0]!;
  const node = (await c.core.listNode()).items.find((n) =>
    n.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True"),
  );
  nodeIp = node!.status!.addresses!.find((a) => a.type === "InternalIP")!.address;

  ns = await createNamespace(c, "sec-domains");
  // The proxy as the chart runs it: its image, its own service account reading pods,
  // Sandboxes and pools of the namespace, and the cluster's addresses.
  await c.objects.create({
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRole",
    metadata: { name: CLUSTER_ROLE },
    rules: [
      {
        apiGroups: ["sandpit.dev"],
        resources: ["sandboxes", "sandboxpools"],
        verbs: ["get", "list", "watch"],
      },
      { apiGroups: [""], resources: ["pods", "nodes"], verbs: ["get", "list", "watch"] },
      {
        apiGroups: ["discovery.k8s.io"],
        resources: ["endpointslices"],
        verbs: ["get", "list", "watch"],
      },
    ],
  });
  await c.objects.create({
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRoleBinding",
    metadata: { name: CLUSTER_ROLE },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: CLUSTER_ROLE },
    subjects: [{ kind: "ServiceAccount", name: "egress", namespace: ns }],
  });
  await c.core.createNamespacedServiceAccount({
    namespace: ns,
    body: { metadata: { name: "egress" } },
  });
  const labels = { "app.kubernetes.io/name": "sandpit-egress" };
  await c.core.createNamespacedPod({
    namespace: ns,
    body: {
      metadata: { name: "egress", labels },
      spec: {
        serviceAccountName: "egress",
        hostAliases: [
          {
            ip: server,
            hostnames: ["pkgs.allowed.test", "files.wild.test", "wild.test", "denied.test"],
          },
          { ip: nodeIp, hostnames: ["node.allowed.test"] },
        ],
        securityContext: { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } },
        containers: [
          {
            name: "egress",
            image: inject("clusterEgressImage"),
            imagePullPolicy: "IfNotPresent",
            env: [
              { name: "SANDPIT_WATCH_NAMESPACE", value: ns },
              { name: "SANDPIT_EGRESS_EXCLUDE_CIDRS", value: machineAddressCidrs().join(",") },
            ],
            ports: [{ containerPort: 3128 }],
            readinessProbe: { httpGet: { path: "/readyz", port: 8081 }, periodSeconds: 1 },
            securityContext: {
              allowPrivilegeEscalation: false,
              readOnlyRootFilesystem: true,
              capabilities: { drop: ["ALL"] },
            },
          },
        ],
      },
    },
  });
  const service = await c.core.createNamespacedService({
    namespace: ns,
    body: {
      metadata: { name: "sandpit-egress" },
      spec: { selector: labels, ports: [{ port: 3128, targetPort: 3128 }] },
    },
  });
  proxyAddress = `${service.spec!.clusterIP!}:3128`;
  await waitFor("the egress proxy ready", 120_000, async () => {
    const p = await c.core.readNamespacedPod({ name: "egress", namespace: ns });
    return p.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True");
  });

  operator = await startOperator({
    kubeconfig: inject("kubeconfig"),
    namespace: ns,
    image: inject("clusterSandboxImage"),
    env: { SANDPIT_EGRESS_PROXY: proxyAddress },
  });
  const env = [
    { name: "PIP_INDEX_URL", value: "http://pkgs.allowed.test/simple/" },
    // The test's index is plain HTTP, which pip takes only from a host it is told to trust.
    { name: "PIP_TRUSTED_HOST", value: "pkgs.allowed.test denied.test" },
    { name: "npm_config_registry", value: "http://pkgs.allowed.test/" },
  ];
  await Promise.all([
    sandboxes.create(c, ns, "domains", {
      language: "python",
      env,
      network: { egress: "Allowlist", allowDomains: ALLOWED },
    }),
    sandboxes.create(c, ns, "wild-only", {
      language: "python",
      network: { egress: "Allowlist", allowDomains: ["*.wild.test"] },
    }),
    sandboxes.create(c, ns, "internet", { language: "python" }),
    pools.create(c, ns, "domains-pool", {
      maxActive: 2,
      warm: 1,
      template: {
        language: "python",
        env,
        // Installed by each warm pod before it is adopted: through the proxy, as the pool's.
        packages: [{ name: "sandpit-demo" }],
        network: { egress: "Allowlist", allowDomains: ALLOWED },
      },
    }),
  ]);
  await Promise.all(["domains", "wild-only", "internet"].map(ready));
}, 600_000);

afterAll(async () => {
  await operator?.stop();
  await internet?.stop();
  if (ns) await deleteNamespace(c, ns);
  for (const kind of ["ClusterRoleBinding", "ClusterRole"])
    await c.objects
      .delete({
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind,
        metadata: { name: CLUSTER_ROLE },
      })
      .catch(() => undefined);
  if (files) rmSync(files, { recursive: true, force: true });
}, 120_000);

describe("network.allowDomains", () => {
  test(
    "pip and npm install from an allowed domain, through the proxy the sandbox is given",
    { timeout: 240_000 },
    async () => {
      const pip = await sh(
        "domains",
        "pip install --no-input --disable-pip-version-check --target /tmp/py sandpit-demo && PYTHONPATH=/tmp/py python3 -c 'import sandpit_demo; print(sandpit_demo.ORIGIN)'",
      );
      expect(pip.out).toContain("the test internet");
      expect(pip.code, pip.out).toBe(0);
      const npm = await sh(
        "domains",
        "cd /tmp && npm install --no-audit --no-fund --prefix /tmp/js sandpit-demo && node -e 'console.log(require(\"/tmp/js/node_modules/sandpit-demo\"))'",
      );
      expect(npm.code, npm.out).toBe(0);
      expect(npm.out).toContain("the test internet");
      const env = await sh("domains", "echo $HTTPS_PROXY $http_proxy");
      expect(env.out.trim()).toBe(`http://${proxyAddress} http://${proxyAddress}`);
    },
  );

  test(
    "curl reaches an allowed name by plain HTTP and through a CONNECT tunnel, a wildcard's subdomain too",
    { timeout: 120_000 },
    async () => {
      expect((await sh("domains", "curl -sS --max-time 10 http://pkgs.allowed.test/")).out).toBe(
        NONCE,
      );
      expect((await sh("domains", "curl -sS --max-time 10 -p http://pkgs.allowed.test/")).out).toBe(
        NONCE,
      );
      expect((await sh("domains", "curl -sS --max-time 10 http://files.wild.test/")).out).toBe(
        NONCE,
      );
    },
  );

  test(
    "refuses names not allowed, a wildcard's bare domain, addresses, and a name leading to the node",
    { timeout: 120_000 },
    async () => {
      const server = internet!.addresses[0]!;
      const cases: [string, RegExp][] = [
        ["http://denied.test/", /denied\.test is not in the allowDomains of sandbox/],
        ["http://wild.test/", /wild\.test is not in the allowDomains/],
        [`http://${server}/`, /not a domain name/],
        [
          "http://node.allowed.test/",
          new RegExp(
            `node\\.allowed\\.test resolves to ${nodeIp.replace(/\./g, "\\.")}, an address no sandbox may reach`,
          ),
        ],
      ];
      for (const [url, why] of cases) {
        const r = await sh("domains", `curl -sS --max-time 10 -w ' status=%{http_code}' ${url}`);
        expect(r.out, url).toMatch(why);
        expect(r.out, url).toContain("status=403");
        const tunnel = await sh("domains", `curl -sS --max-time 10 -p ${url}`);
        expect(tunnel.code, url).not.toBe(0);
        expect(tunnel.out, url).toMatch(/403/);
      }
      const pip = await sh(
        "domains",
        "pip install --no-input --disable-pip-version-check --target /tmp/denied http://denied.test/files/sandpit_demo-1.0-py3-none-any.whl",
      );
      expect(pip.code).not.toBe(0);
      expect(pip.out).toMatch(/403 Client Error: Forbidden/);
    },
  );

  test(
    "nothing but the proxy: the server's address is not reachable directly, and no name resolves",
    { timeout: 120_000 },
    async () => {
      const server = internet!.addresses[0]!;
      const direct = await sh(
        "domains",
        `curl -sS --noproxy '*' --max-time 5 http://${server}/ ; echo " exit=$?"`,
      );
      expect(direct.out).not.toContain(NONCE);
      const dns = await sh("domains", "getent hosts pkgs.allowed.test example.com; echo exit=$?");
      expect(dns.out.trim()).toBe("exit=2");
    },
  );

  test(
    "each sandbox's allowance is its own, and a sandbox without domains cannot use the proxy",
    { timeout: 120_000 },
    async () => {
      const wild = await sh(
        "wild-only",
        "curl -sS --max-time 10 http://files.wild.test/ http://pkgs.allowed.test/",
      );
      expect(wild.out).toContain(NONCE);
      expect(wild.out).toMatch(
        new RegExp(`pkgs\\.allowed\\.test is not in the allowDomains of sandbox ${ns}/wild-only`),
      );
      const other = await sh(
        "internet",
        `curl -sS --max-time 5 -x http://${proxyAddress} http://pkgs.allowed.test/ ; echo " exit=$?"`,
      );
      expect(other.out).not.toContain(NONCE);
      expect(other.out).toMatch(/exit=(7|28)/); // not connected: the policy, not the proxy, refused
    },
  );

  test(
    "a warm pool with domains in its template installs its packages through them, and a sandbox adopted from it reaches them",
    { timeout: 300_000 },
    async () => {
      await waitFor("a warm pod of the pool", 240_000, async () => {
        const p = await pools.get(c, ns, "domains-pool");
        return (p.status?.warmReady ?? 0) >= 1;
      });
      await sandboxes.create(c, ns, "from-pool", { poolRef: "domains-pool" });
      await ready("from-pool");
      const s = await sandboxes.get(c, ns, "from-pool");
      expect(s.status!.podName).not.toBe("from-pool"); // adopted, not made for it
      const r = await sh(
        "from-pool",
        "curl -sS --max-time 10 http://pkgs.allowed.test/; echo; curl -sS --max-time 10 http://denied.test/",
      );
      expect(r.out).toContain(NONCE);
      expect(r.out).toMatch(/denied\.test is not in the allowDomains of sandbox .*\/from-pool/);
      // The template's package, installed by the warm pod before adoption.
      const pkg = await sh(
        "from-pool",
        "python3 -c 'import sandpit_demo; print(sandpit_demo.ORIGIN)'",
      );
      expect(pkg.out.trim(), pkg.out).toBe("the test internet");
    },
  );

  test("the API server refuses domains outside an Allowlist, and names that are no domain", async () => {
    for (const network of [
      { egress: "Internet", allowDomains: ["pypi.org"] },
      { egress: "Allowlist", allowDomains: ["10.0.0.1"] },
      { egress: "Allowlist", allowDomains: ["kubernetes"] },
    ]) {
      await expect(
        sandboxes.create(c, ns, `bad-${rand}`, { network }),
        JSON.stringify(network),
      ).rejects.toMatchObject({
        code: 422,
      });
    }
  });
});
