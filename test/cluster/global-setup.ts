/**
 * vitest globalSetup for the cluster suite: brings the cluster up (test/cluster/up), loads the
 * sandbox, operator and provisioner images into its containerd under local names, and stops the
 * cluster afterwards if it was not already running.
 */
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { TestProject } from "vitest/node";
import { CLUSTER_STATE, ensureClusterImages } from "./images.ts";

declare module "vitest" {
  export interface ProvidedContext {
    kubeconfig: string;
    clusterSandboxImage: string;
    clusterOperatorImage: string;
    clusterProvisionerImage: string;
    clusterEgressImage: string;
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

  // The images go into the cluster's containerd without a registry.
  const images = await ensureClusterImages({ log });
  project.provide("kubeconfig", kubeconfig);
  project.provide("clusterSandboxImage", images.sandbox);
  project.provide("clusterOperatorImage", images.operator);
  project.provide("clusterProvisionerImage", images.provisioner);
  project.provide("clusterEgressImage", images.egress);
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
