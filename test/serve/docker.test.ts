/**
 * `sandpit serve --backend docker` as a child process, on the engine and image of the docker
 * project's global setup: the provisioner's API suites (test/serve/api-suite.ts), and the SDK
 * contract suite through the kubernetes provider pointed at it.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { inject } from "vitest";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import { contractSuite } from "../contract/suite.ts";
import { serveApiSuite } from "./api-suite.ts";
import { KEYS, KEY_LIST, startServe } from "./harness.ts";

const run = promisify(execFile);
// No warm pool here: its blank containers belong to no serve state, so nothing would remove them.
const args = () => ["--backend", "docker", "--image", inject("sandboxImage"), "--warm", "0"];
const dockerEnv = () => ({ DOCKER_HOST: `unix://${inject("dockerSocket")}` });

serveApiSuite("docker", {
  args: args(),
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
        await rm(stateDir, { recursive: true, force: true });
      },
    };
  },
  {
    // What serve's native API honours of create's platform options on this backend.
    platform: {
      provider: "kubernetes",
      ttl: true,
      idleTimeout: true,
      cpu: true,
      memory: true,
      disk: false,
      template: false,
      networkDeny: true,
      networkInternet: false,
      networkAllow: false,
      mounts: false,
      expiresAt: true,
      ttlEnforced: false,
      memoryEnforced: false,
      isolationVisible: false,
    },
  },
);
