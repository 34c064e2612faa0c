/** The contract suite on the docker provider: the real sandbox image on a real Docker engine. */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { inject } from "vitest";
import { DockerProvider } from "@sandpit/sdk/docker";
import { contractSuite } from "./suite.ts";

const run = promisify(execFile);
const PREFIX = "sandpit-ct";

contractSuite(
  "docker",
  async () => {
    const provider = new DockerProvider({
      image: inject("sandboxImage"),
      containerPrefix: PREFIX,
      basePort: 31000,
      idleTimeoutMs: 0,
    });
    return {
      provider,
      streamBytes: 1024 * 1024 * 1024,
      teardown: async () => {
        await provider.close();
        const { stdout } = await run("docker", ["ps", "-aq", "--filter", `name=^${PREFIX}-`]);
        const ids = stdout.split("\n").filter(Boolean);
        if (ids.length) await run("docker", ["rm", "-f", "-v", ...ids]);
      },
    };
  },
  {
    platform: {
      provider: "docker",
      ttl: true,
      idleTimeout: true,
      cpu: true,
      memory: true,
      // The data volume's driver has no size limit.
      disk: false,
      template: true,
      networkDeny: true,
      networkInternet: true,
      // Docker networks have no per-destination egress filter.
      networkAllow: false,
      mounts: true,
      expiresAt: true,
      ttlEnforced: true,
      memoryEnforced: true,
      isolationVisible: true,
    },
  },
);
