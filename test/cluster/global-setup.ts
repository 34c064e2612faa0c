/**
 * vitest globalSetup for the cluster suite: brings the cluster up (test/cluster/up), loads the
 * sandbox image into its containerd under a local name, and stops the cluster afterwards if it
 * was not already running.
 */
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { TestProject } from "vitest/node";
import { ensureTestImage } from "../docker/test-image.ts";
import { ensureDocker } from "../docker/dockerd.ts";
import { CLUSTER_STATE, loadIntoCluster } from "./images.ts";

declare module "vitest" {
  export interface ProvidedContext {
    kubeconfig: string;
    clusterSandboxImage: string;
  }
}

const run = promisify(execFile);
const HERE = new URL(".", import.meta.url).pathname;

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const log = (line: string) => process.stderr.write(`[cluster setup] ${line}\n`);
  const wasRunning =
    existsSync(join(CLUSTER_STATE, "pids", "kube-apiserver")) &&
    isAlive(readFileSync(join(CLUSTER_STATE, "pids", "kube-apiserver"), "utf8"));
  const started = performance.now();
  const { stdout } = await run(join(HERE, "up"), [], {
    maxBuffer: 16 * 1024 * 1024,
    timeout: 30 * 60_000,
  });
  log(`cluster up in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  const kubeconfig = stdout.trim().split("\n").at(-1)!;

  // The sandbox image goes into the cluster's containerd without a registry.
  const engine = await ensureDocker({ log });
  const { tag } = await ensureTestImage({ log });
  const local = await loadIntoCluster(tag, "sandbox", { log });
  await engine.stop();
  project.provide("kubeconfig", kubeconfig);
  project.provide("clusterSandboxImage", local);
  return async () => {
    if (!wasRunning) await run(join(HERE, "down"), [], { timeout: 120_000 });
  };
}

function isAlive(pid: string): boolean {
  try {
    process.kill(Number(pid), 0);
    return true;
  } catch {
    return false;
  }
}
