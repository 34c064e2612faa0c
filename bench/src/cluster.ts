/**
 * Local cluster benchmark (test/cluster): `up` time with the binaries cached, pod start of the
 * sandbox image (created → Running, and → Ready with sandboxd answering its probe) over 20 pods
 * started one after another, and the memory of every component once the cluster is up.
 *
 *   node bench/src/cluster.ts        (as root; brings the cluster up, leaves it as it found it)
 */
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { ensureTestImage } from "../../test/docker/test-image.ts";
import { ensureDocker } from "../../test/docker/dockerd.ts";
import { CLUSTER_STATE, loadIntoCluster } from "../../test/cluster/images.ts";
import { writeResults } from "./report.ts";
import { summarize } from "./stats.ts";

const run = promisify(execFile);
const ROOT = new URL("../../", import.meta.url).pathname;
const PODS = 20;
const NS = "bench";
const log = (line: string) => process.stderr.write(`[bench] ${line}\n`);

async function main(): Promise<void> {
  await run(join(ROOT, "test/cluster/down"), [], { timeout: 120_000 }).catch(() => undefined);
  const upStarted = performance.now();
  const { stdout } = await run(join(ROOT, "test/cluster/up"), [], { timeout: 30 * 60_000 });
  const upMs = performance.now() - upStarted;
  log(`up in ${(upMs / 1000).toFixed(1)} s`);

  const engine = await ensureDocker({ log });
  const { tag } = await ensureTestImage({ log });
  const image = await loadIntoCluster(tag, "sandbox", { log });
  await engine.stop();

  const kc = new KubeConfig();
  kc.loadFromFile(stdout.trim().split("\n").at(-1)!);
  const core = kc.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: NS } } });
  const running: number[] = [];
  const ready: number[] = [];
  try {
    for (let i = 0; i < PODS; i++) {
      const name = `p${i}`;
      const started = performance.now();
      await core.createNamespacedPod({
        namespace: NS,
        body: {
          metadata: { name },
          spec: {
            automountServiceAccountToken: false,
            containers: [
              {
                name: "sandboxd",
                image,
                imagePullPolicy: "Never",
                env: [{ name: "SANDBOXD_TOKEN", value: "b".repeat(64) }],
                readinessProbe: { httpGet: { path: "/healthz", port: 8080 }, periodSeconds: 1 },
              },
            ],
          },
        },
      });
      let runningAt = 0;
      for (let poll = 0; poll < 1200; poll++) {
        const pod = await core.readNamespacedPod({ name, namespace: NS });
        if (!runningAt && pod.status?.phase === "Running") runningAt = performance.now();
        if (pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True")) {
          ready.push(performance.now() - started);
          break;
        }
        await new Promise((r) => setTimeout(r, 25));
      }
      if (runningAt) running.push(runningAt - started);
    }
    const memory: Record<string, number> = {};
    for (const c of [
      "etcd",
      "kube-apiserver",
      "kube-controller-manager",
      "kube-scheduler",
      "kubelet",
      "kube-proxy",
      "containerd",
      "kube-router",
    ]) {
      const pid = (await readFile(join(CLUSTER_STATE, "pids", c), "utf8")).trim();
      const status = await readFile(`/proc/${pid}/status`, "utf8");
      memory[c] = Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]) / 1024);
    }
    const controlPlane = [
      "etcd",
      "kube-apiserver",
      "kube-controller-manager",
      "kube-scheduler",
    ].reduce((a, c) => a + memory[c]!, 0);
    const r = { running: summarize(running), ready: summarize(ready) };
    const f = (n: number) => n.toFixed(0);
    console.log(`| Metric | Result | Goal |\n|---|---:|---|`);
    console.log(
      `| \`up\` after \`down\`, binaries and state cached (s) | ${(upMs / 1000).toFixed(1)} | ≤ 60 s |`,
    );
    console.log(
      `| sandbox-image pod created → Running, p50 / p99 (ms, N=${running.length}) | ${f(r.running.p50)} / ${f(r.running.p99)} | p99 ≤ 5 s |`,
    );
    console.log(
      `| … → Ready (sandboxd answers its probe), p50 / p99 (ms) | ${f(r.ready.p50)} / ${f(r.ready.p99)} | |`,
    );
    console.log(
      `| control plane RSS (etcd, apiserver, controller-manager, scheduler) | ${controlPlane} MiB | |`,
    );
    console.log(
      `| per component RSS (MiB) | ${Object.entries(memory)
        .map(([k, v]) => `${k} ${v}`)
        .join(", ")} | |`,
    );
    await writeResults(join(ROOT, "bench/results/cluster.json"), {
      date: new Date().toISOString(),
      upMs,
      pods: PODS,
      ...r,
      memoryMiB: memory,
    });
  } finally {
    await core.deleteNamespace({ name: NS }).catch(() => undefined);
    await run(join(ROOT, "test/cluster/down"), [], { timeout: 120_000 }).catch(() => undefined);
  }
}

await main();
