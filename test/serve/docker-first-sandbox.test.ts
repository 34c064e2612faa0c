/**
 * serve's first sandbox on the Docker backend (test/serve/first-sandbox-suite.ts), on the engine
 * and image of the docker project's global setup.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { inject } from "vitest";
import { firstSandboxSuite } from "./first-sandbox-suite.ts";

const run = promisify(execFile);

firstSandboxSuite(
  "docker",
  // No warm pool: its blank containers belong to no serve state, so nothing would remove them.
  () => ["--backend", "docker", "--image", inject("sandboxImage"), "--warm", "0"],
  async (_stateDir, stateId) => {
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
  () => ({ DOCKER_HOST: `unix://${inject("dockerSocket")}` }),
);
