/**
 * Apple's `container` runtime, on Linux, through a fake `container` executable on PATH that
 * records its arguments and answers like the real CLI: detection on macOS when Docker is absent,
 * and the commands the provider issues.
 */
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { detectRuntime } from "../../sdk/src/providers/docker/detect.ts";
import { AppleContainerRuntime } from "../../sdk/src/providers/docker/apple-runtime.ts";
import { expectSandboxError } from "../contract/suite.ts";

let dir: string;
let log: string;
const savedPath = process.env.PATH;

const INSPECT = JSON.stringify([
  {
    status: "running",
    configuration: {
      id: "sandpit-0123456789abcdef",
      labels: { "sandpit.dev/managed": "true" },
      initProcess: { environment: ["SANDBOXD_TOKEN=abc", "PATH=/usr/bin"] },
      publishedPorts: [
        { hostAddress: "127.0.0.1", hostPort: 28080, containerPort: 8080, proto: "tcp" },
      ],
      mounts: [{ source: "sandpit-0123456789abcdef-data", destination: "/mnt/user-data" }],
    },
    networks: [{ address: "192.168.64.5/24" }],
  },
]);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "fake-container-"));
  log = join(dir, "calls.log");
  // The fake: logs each call, then answers the sub-commands the runtime uses.
  await writeFile(
    join(dir, "container"),
    `#!/bin/sh
echo "$*" >> "${log}"
case "$1" in
  --version) echo "container CLI version 0.5.0" ;;
  system) echo "apiserver is running" ;;
  inspect) if [ "$2" = "missing" ]; then echo "Error: container not found: missing" >&2; exit 1; fi; echo '${INSPECT}' ;;
  list) echo '${INSPECT}' ;;
  image) [ "$3" = "sandpit-sandbox:latest" ] || { echo "Error: image not found" >&2; exit 1; } ;;
  *) ;;
esac
`,
  );
  await chmod(join(dir, "container"), 0o755);
  process.env.PATH = `${dir}:${savedPath}`;
});
afterAll(async () => {
  process.env.PATH = savedPath;
  await rm(dir, { recursive: true, force: true });
});

describe("Apple container runtime", () => {
  it("is chosen on macOS when Docker does not answer and `container --version` works", async () => {
    const rt = await detectRuntime(
      { runtime: "auto", socketPath: join(dir, "no-docker.sock") },
      undefined,
      "darwin",
    );
    expect(rt).toBeInstanceOf(AppleContainerRuntime);
    expect(await readFile(log, "utf8")).toContain("--version");
  });

  it("is not chosen on Linux: there, a missing Docker is CONNECTION_FAILED saying how to start it", async () => {
    const err = await expectSandboxError(
      detectRuntime(
        { runtime: "auto", socketPath: join(dir, "no-docker.sock") },
        undefined,
        "linux",
      ),
      "CONNECTION_FAILED",
    );
    expect(err.message).toMatch(/start it/);
  });

  it("runs a container with the limits, port, volume and read-only root the provider asks for", async () => {
    const rt = new AppleContainerRuntime();
    const info = await rt.run({
      name: "sandpit-0123456789abcdef",
      image: "sandpit-sandbox:latest",
      env: { SANDBOXD_TOKEN: "abc" },
      labels: { "sandpit.dev/managed": "true" },
      volume: "sandpit-0123456789abcdef-data",
      hostPort: 28080,
      bindHost: "127.0.0.1",
      socketDir: null,
      cpus: 2,
      memoryBytes: 512 * 1024 * 1024,
      pids: 512,
      readOnlyRoot: true,
    });
    const calls = (await readFile(log, "utf8")).trim().split("\n");
    expect(calls).toContain("volume create sandpit-0123456789abcdef-data");
    const run = calls.find((c) => c.startsWith("run "))!;
    expect(run).toContain("--detach --name sandpit-0123456789abcdef --cpus 2 --memory 512M");
    expect(run).toContain("--env SANDBOXD_TOKEN=abc");
    expect(run).toContain("--publish 127.0.0.1:28080:8080");
    expect(run).toContain("--volume sandpit-0123456789abcdef-data:/mnt/user-data");
    expect(run).toContain("--read-only");
    expect(run.endsWith("sandpit-sandbox:latest")).toBe(true);
    expect(info).toMatchObject({
      name: "sandpit-0123456789abcdef",
      running: true,
      endpoint: "127.0.0.1:28080",
      volume: "sandpit-0123456789abcdef-data",
      env: { SANDBOXD_TOKEN: "abc" },
    });
  });

  it("reports a missing container as null, an image check as a boolean, and refuses rename", async () => {
    const rt = new AppleContainerRuntime();
    expect(await rt.inspect("missing")).toBeNull();
    expect(await rt.imageExists("sandpit-sandbox:latest")).toBe(true);
    expect(await rt.imageExists("other:tag")).toBe(false);
    await expectSandboxError(rt.rename("a", "b"), "INVALID_ARGUMENT");
    await rt.stop("sandpit-0123456789abcdef");
    await rt.remove("sandpit-0123456789abcdef", "sandpit-0123456789abcdef-data");
    const calls = await readFile(log, "utf8");
    expect(calls).toContain("stop sandpit-0123456789abcdef");
    expect(calls).toContain("delete --force sandpit-0123456789abcdef");
    expect(calls).toContain("volume delete sandpit-0123456789abcdef-data");
  });

  it("says the CLI is missing when it is not installed", async () => {
    await expectSandboxError(
      new AppleContainerRuntime(join(dir, "nope")).ping(),
      "CONNECTION_FAILED",
    );
  });
});
