/**
 * The contract suite on the local provider, in both isolation modes. CI installs bubblewrap,
 * so the bwrap run is required there; on a machine without it, the run is reported as skipped.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalProvider } from "@sandpit/sdk";
import { bwrapAvailable } from "../../sdk/src/providers/local/bwrap.ts";
import { contractSuite } from "./suite.ts";

const bwrap = await bwrapAvailable();
if (!bwrap && process.env.CI)
  throw new Error("bubblewrap must be installed in CI (apt-get install bubblewrap)");

for (const isolation of ["none", "bwrap"] as const) {
  contractSuite(
    `local (isolation: ${isolation})`,
    async () => {
      const baseDir = await mkdtemp(join(tmpdir(), `sandpit-contract-${isolation}-`));
      const provider = new LocalProvider({ baseDir, isolation });
      return {
        provider,
        streamBytes: 1024 * 1024 * 1024,
        teardown: async () => {
          await provider.close();
          await rm(baseDir, { recursive: true, force: true });
        },
      };
    },
    {
      skipReason:
        isolation === "bwrap" && !bwrap ? "bubblewrap is not available on this machine" : undefined,
    },
  );
}
