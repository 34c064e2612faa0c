/**
 * `sandpit serve --backend docker` as a child process, on the engine and image of the docker
 * project's global setup: the provisioner's API suites (test/serve/api-suite.ts), and the SDK
 * contract suite through the kubernetes provider pointed at it.
 */
import { execFile } from "node:child_process";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { inject } from "vitest";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import { contractSuite } from "../contract/suite.ts";
import { serveApiSuite } from "./api-suite.ts";
import { KEYS, KEY_LIST, startServe, removeState } from "./harness.ts";

const run = promisify(execFile);
// No warm pool here: its blank containers belong to no serve state, so nothing would remove them.
const args = () => ["--backend", "docker", "--image", inject("sandboxImage"), "--warm", "0"];
const dockerEnv = () => ({ DOCKER_HOST: `unix://${inject("dockerSocket")}` });

serveApiSuite("docker", {
  args: args(),
  supports: { resources: true, networkDeny: true },
  leftovers: async (_stateDir, stateId) => {
    const { stdout } = await run("docker", [
      "ps",
      "-a",
      "--format",
      "{{.Names}}",
      "--filter",
      `label=serve.sandpit.dev/state=${stateId}`,
    ]);
    return stdout.split("\n").filter(Boolean);
  },
  env: dockerEnv(),
});

contractSuite(
  "kubernetes provider → sandpit serve (docker)",
  async () => {
    const stateDir = await mkdtemp(join(tmpdir(), "sandpit-serve-contract-docker-"));
    const serve = await startServe(["--state-dir", stateDir, ...args()], {
      ...dockerEnv(),
      SANDPIT_API_KEYS: JSON.stringify(KEY_LIST),
      SANDPIT_READY_TIMEOUT_MS: "600000",
    });
    return {
      provider: new KubernetesProvider({
        provisionerUrl: serve.url,
        apiKey: KEYS.a,
        readyTimeoutMs: 600_000,
      }),
      streamBytes: 256 * 1024 * 1024,
      teardown: async () => {
        await serve.stop();
        await removeState(stateDir);
      },
    };
  },
  {
    // What serve carries out of create's platform options on Docker (the kubernetes provider
    // refuses, before asking, what the native API has no field for: network "internet", an
    // allow list, mounts).
    platform: {
      provider: "kubernetes",
      // serve's reaper deletes at the TTL, and the Docker provider holds the same end.
      ttl: true,
      // serve's reaper pauses after the timeout without traffic through its proxy.
      idleTimeout: true,
      // Container limits (the Docker provider's resources).
      cpu: true,
      memory: true,
      // Refused with NOT_SUPPORTED: the Docker data volume's driver has no size limit.
      disk: false,
      // Refused with NOT_SUPPORTED: serve has no SandboxPools, only the image it runs.
      template: false,
      // A container without a network (the Docker provider's network "deny").
      networkDeny: true,
      networkInternet: false,
      networkAllow: false,
      mounts: false,
      expiresAt: true,
      // The native API's shortest TTL is 60 s: a seconds-scale lifetime is refused (400).
      ttlEnforced: false,
      // A container's memory limit is the kernel's: the 400 MiB allocation is killed.
      memoryEnforced: true,
      // Needs mounts, which the kubernetes provider refuses.
      isolationVisible: false,
    },
  },
);
