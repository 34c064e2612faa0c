/** The contract suite on the docker provider: the real sandbox image on a real Docker engine. */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { inject } from "vitest";
import { DockerProvider } from "@sandpit/sdk/docker";
import { contractSuite } from "./suite.ts";

const run = promisify(execFile);
const PREFIX = "sandpit-ct";

contractSuite("docker", async () => {
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
});
