/**
 * Host-based routing through the chart's Ingress, behind a real ingress controller: Traefik
 * (test/cluster/ingress.ts) watching this release's namespace, TLS ending at it with a wildcard
 * certificate made here by a CA made here, and a DNS record `*.<zone>` pointing at it. The
 * release is installed from charts/sandpit/examples/e2b-ingress-traefik.yaml with only its class,
 * host and domain changed to this run's. Then the official E2B SDKs, JavaScript and Python, run
 * an unchanged program (test/chart/ingress/program.{ts,py}) with nothing but E2B_DOMAIN and
 * E2B_API_KEY (and their runtime's way to trust the CA): create, run a command, write and read a
 * file, a 10 MiB upload, a streamed command, a server in the sandbox opened at getHost(port)
 * like a browser (a plain GET over https), kill.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { AppsV1Api, CoreV1Api, CustomObjectsApi, KubeConfig } from "@kubernetes/client-node";
import { Agent, fetch } from "undici";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { type IngressController, startIngressController } from "../cluster/ingress.ts";
import { waitFor } from "../cluster/harness.ts";
import { ensureVenv } from "../deerflow/python.ts";
import { CHART, clusterBin, helmRunner, releaseValues } from "./release.ts";

const run = promisify(execFile);
const HERE = new URL(".", import.meta.url).pathname;
const log = (line: string) => process.stderr.write(`[ingress] ${line}\n`);

const kubeconfig = inject("kubeconfig");
const kc = new KubeConfig();
kc.loadFromFile(kubeconfig);
const core = kc.makeApiClient(CoreV1Api);
const apps = kc.makeApiClient(AppsV1Api);
const custom = kc.makeApiClient(CustomObjectsApi);

const id = randomBytes(3).toString("hex");
const release = `spi-${id}`;
const systemNs = `sandpit-ingress-${id}`;
const sandboxNs = `sandpit-ingress-sbx-${id}`;
const fullname = `${release}-sandpit`;
// Everything under the zone resolves to the controller; the E2B domain and the native API's
// host are two names in it (the host must not be under the domain: that is sandboxes' space).
const zone = `ingress-${id}.sandpit.test`;
const domain = `sbx.${zone}`;
const host = `native.${zone}`;
const ingressClass = `sandpit-test-${id}`;
// The example's Secret name, kept: the test changes only class, host and domain.
const TLS_SECRET = "sandboxes-example-com-wildcard";
// A key of the form the Python SDK checks (e2b_ and hex), so no E2B_VALIDATE_API_KEY is needed.
const KEY = `e2b_${randomBytes(20).toString("hex")}`;

const certs = mkdtempSync(join(tmpdir(), "sandpit-ingress-certs-"));
const caFile = join(certs, "ca.crt");
let controller: IngressController | undefined;
let helm: (...args: string[]) => Promise<string>;
let installed = false;

/** A CA, and a certificate it signs for `*.<domain>` and the native host (TLS at the ingress). */
async function makeCertificates(): Promise<{ crt: string; key: string }> {
  const openssl = (...args: string[]) => run("openssl", args, { cwd: certs, timeout: 30_000 });
  await openssl(
    ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
    ...[
      "-keyout",
      "ca.key",
      "-out",
      "ca.crt",
      "-days",
      "2",
      "-subj",
      "/CN=Sandpit ingress test CA",
    ],
    ...["-addext", "basicConstraints=critical,CA:TRUE"],
    ...["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
  );
  await openssl(
    ...["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
    ...["-keyout", "tls.key", "-out", "tls.csr", "-subj", `/CN=*.${domain}`],
  );
  writeFileSync(
    join(certs, "leaf.ext"),
    `subjectAltName=DNS:*.${domain},DNS:${host}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n`,
  );
  await openssl(
    ...["x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key"],
    ...["-CAcreateserial", "-out", "tls.crt", "-days", "2", "-extfile", "leaf.ext"],
  );
  return {
    crt: readFileSync(join(certs, "tls.crt"), "utf8"),
    key: readFileSync(join(certs, "tls.key"), "utf8"),
  };
}

/**
 * What the test itself fetches through the controller with (undici's own fetch: Node's bundled
 * one refuses a dispatcher of another undici version): the zone's address, the CA.
 */
function throughController(address: string): Agent {
  return new Agent({
    connect: {
      ca: readFileSync(caFile, "utf8"),
      lookup: (_hostname, options, callback) => {
        if (options.all) callback(null, [{ address, family: 4 }]);
        else callback(null, address, 4);
      },
    },
  });
}

beforeAll(async () => {
  const bin = await clusterBin();
  helm = helmRunner(bin, kubeconfig, id);
  const { crt, key } = await makeCertificates();
  await core.createNamespace({ body: { metadata: { name: systemNs } } });
  await core.createNamespacedSecret({
    namespace: systemNs,
    body: {
      metadata: { name: TLS_SECRET },
      type: "kubernetes.io/tls",
      stringData: { "tls.crt": crt, "tls.key": key },
    },
  });
  controller = await startIngressController({
    bin,
    kubeconfig,
    namespace: systemNs,
    ingressClass,
    zone,
  });
  log(`Traefik ${controller.version} on ${controller.address}:443, *.${zone} -> it`);

  const started = Date.now();
  await helm(
    "install",
    release,
    CHART,
    "-n",
    systemNs,
    "--take-ownership",
    "--wait",
    "--timeout",
    "5m",
    "-f",
    `${CHART}/examples/e2b-ingress-traefik.yaml`,
    ...releaseValues(
      {
        operator: inject("clusterOperatorImage"),
        provisioner: inject("clusterProvisionerImage"),
        egress: inject("clusterEgressImage"),
        sandbox: inject("clusterSandboxImage"),
      },
      sandboxNs,
    ),
    "--set",
    `provisioner.ingress.className=${ingressClass}`,
    "--set",
    `provisioner.ingress.host=${host}`,
    "--set",
    `provisioner.publicUrl=https://${host}`,
    "--set",
    `provisioner.e2b.domain=${domain}`,
    "--set-json",
    `provisioner.apiKeys=[{"key":"${KEY}","tenant":"ingress","maxSandboxes":5}]`,
  );
  installed = true;
  log(`installed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  // Traefik routes once it has seen the Ingress, its Secret and the pods' endpoints.
  const dispatcher = throughController(controller.address);
  try {
    await waitFor(`https://${host}/healthz through Traefik`, 60_000, async () => {
      const res = await fetch(`https://${host}/healthz`, { dispatcher });
      return res.status === 200;
    });
  } catch (err) {
    throw new Error(`${String(err)}\n${controller.logs()}`, { cause: err });
  } finally {
    await dispatcher.close();
  }
}, 900_000);

afterAll(async () => {
  if (installed) await helm("uninstall", release, "-n", systemNs, "--wait").catch(() => undefined);
  await controller?.stop();
  for (const name of [sandboxNs, systemNs]) await core.deleteNamespace({ name }).catch(() => {});
  for (const name of [sandboxNs, systemNs]) {
    await waitFor(`namespace ${name} gone`, 180_000, async () =>
      core.readNamespace({ name }).then(
        () => undefined,
        () => true,
      ),
    ).catch((err: unknown) => log(String(err)));
  }
  rmSync(certs, { recursive: true, force: true });
}, 400_000);

/** What both programs print (program.ts, program.py). */
interface Seen {
  sandboxId: string;
  run: { stdout: string; exitCode: number };
  read: string;
  upload: { sent: string; inside: string; back: string };
  stream: { lines: { line: string; atMs: number }[]; endedMs: number };
  browser: { url: string; status: number; body: string };
  runningAfterKill: boolean;
}

function judge(seen: Seen) {
  expect(seen.run).toEqual({ stdout: "hello from Linux\n", exitCode: 0 });
  expect(seen.read).toBe("through the ingress");
  expect(seen.upload.inside).toBe(seen.upload.sent);
  expect(seen.upload.back).toBe(seen.upload.sent);
  // Each line came through when it was written, a second apart, not all at the end.
  const lines = seen.stream.lines;
  expect(lines.map((l) => l.line)).toEqual(["line1", "line2", "line3"]);
  expect(lines[2]!.atMs - lines[0]!.atMs, JSON.stringify(seen.stream)).toBeGreaterThan(1_000);
  expect(seen.browser.url).toBe(`https://8000-${seen.sandboxId}.${domain}/`);
  expect(seen.browser.status).toBe(200);
  expect(seen.browser.body).toContain("served from the sandbox");
  expect(seen.runningAfterKill).toBe(false);
}

async function sandboxGone(sandboxId: string) {
  await waitFor(`Sandbox ${sandboxId} deleted`, 120_000, async () =>
    custom
      .getNamespacedCustomObject({
        group: "sandpit.dev",
        version: "v1alpha1",
        namespace: sandboxNs,
        plural: "sandboxes",
        name: sandboxId,
      })
      .then(
        () => undefined,
        () => true,
      ),
  );
}

/** Runs a program through the controller; resolves with what it printed, or fails with why. */
async function runProgram(cmd: string, args: string[], env: Record<string, string>) {
  const r = await controller!.run(
    cmd,
    args,
    { E2B_DOMAIN: domain, E2B_API_KEY: KEY, ...env },
    300_000,
  );
  const last = r.stdout.trim().split("\n").at(-1) ?? "";
  if (r.code !== 0 || !last.startsWith("{")) {
    throw new Error(
      `${cmd} ${args.join(" ")} exited ${r.code}:\n${r.stdout}\n${r.stderr}\n${controller!.logs()}`,
    );
  }
  return JSON.parse(last) as Seen;
}

describe("the chart's Ingress behind Traefik, E2B SDKs routing by host", () => {
  it("routes the native host and api.<domain> through the controller, with the test's certificate", async () => {
    const dispatcher = throughController(controller!.address);
    try {
      expect((await fetch(`https://${host}/healthz`, { dispatcher })).status).toBe(200);
      // The control plane answers by host; a bad key is E2B's 401, from the provisioner.
      const refused = await fetch(`https://api.${domain}/v2/sandboxes`, {
        dispatcher,
        headers: { "x-api-key": "e2b_0000000000000000000000000000000000000000" },
      });
      expect(refused.status).toBe(401);
      const listed = await fetch(`https://api.${domain}/v2/sandboxes`, {
        dispatcher,
        headers: { "x-api-key": KEY },
      });
      expect(listed.status).toBe(200);
      // A host under the domain that names no sandbox port: the provisioner's E2B 404.
      const stray = await fetch(`https://not-a-sandbox.${domain}/`, { dispatcher });
      expect(stray.status).toBe(404);
    } finally {
      await dispatcher.close();
    }
    const d = await apps.readNamespacedDeployment({
      name: `${fullname}-provisioner`,
      namespace: systemNs,
    });
    expect(d.status?.readyReplicas).toBeGreaterThan(0);
  }, 120_000);

  it("JavaScript SDK (e2b on npm), E2B_DOMAIN and E2B_API_KEY only", async () => {
    const seen = await runProgram(process.execPath, [join(HERE, "ingress", "program.ts")], {
      NODE_EXTRA_CA_CERTS: caFile,
    });
    judge(seen);
    await sandboxGone(seen.sandboxId);
  }, 360_000);

  it("Python SDK (e2b on PyPI), E2B_DOMAIN and E2B_API_KEY only", async () => {
    const python = await ensureVenv(log, join(HERE, "..", "e2b-compat", "requirements.txt"));
    const seen = await runProgram(python, [join(HERE, "ingress", "program.py")], {
      SSL_CERT_FILE: caFile,
      PYTHONDONTWRITEBYTECODE: "1",
    });
    judge(seen);
    await sandboxGone(seen.sandboxId);
  }, 600_000);
});
