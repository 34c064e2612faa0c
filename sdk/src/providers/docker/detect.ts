/**
 * Which container engine to use: Docker when its socket answers; on macOS, Apple's `container`
 * CLI when Docker does not (`container --version` succeeds). Errors say how to start an engine.
 *
 * Both runtimes load here, on the provider's first engine call: a process that only reaches a
 * known sandbox through its sandboxd record (./sandboxd-records.ts) never loads dockerode, the
 * largest part of a CLI invocation's start-up.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import type { Logger } from "../../logger.ts";
import { SandboxError } from "../../errors.ts";
import { loadWithPackages } from "../../optional-package.ts";
import type { ContainerRuntime } from "./runtime.ts";

const run = promisify(execFile);

export function defaultDockerSocket(env: NodeJS.ProcessEnv = process.env): string {
  const host = env.DOCKER_HOST;
  if (host?.startsWith("unix://")) return host.slice("unix://".length);
  return "/var/run/docker.sock";
}

/** True when Apple's `container` CLI is installed and answers. */
export async function appleContainerAvailable(): Promise<boolean> {
  try {
    await run("container", ["--version"], { timeout: 5_000 });
    return true;
  } catch {
    return false;
  }
}

export async function detectRuntime(
  o: { runtime: "auto" | "docker" | "apple"; socketPath?: string | undefined },
  logger?: Logger,
  platform: NodeJS.Platform = process.platform,
): Promise<ContainerRuntime> {
  const apple = async () => new (await import("./apple-runtime.ts")).AppleContainerRuntime();
  if (o.runtime === "apple") return apple();
  const { DockerRuntime } = await loadWithPackages(
    "docker",
    ["dockerode"],
    () => import("./docker-runtime.ts"),
  );
  const docker = new DockerRuntime(o.socketPath ?? defaultDockerSocket());
  try {
    await docker.ping();
    return docker;
  } catch (err) {
    if (o.runtime === "auto" && platform === "darwin" && (await appleContainerAvailable())) {
      logger?.info("Docker is not running; using Apple's container runtime");
      return apple();
    }
    if (err instanceof SandboxError) throw err;
    throw new SandboxError(
      `the Docker engine did not answer: ${(err as Error).message}`,
      "CONNECTION_FAILED",
      err,
    );
  }
}
