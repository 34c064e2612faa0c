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
          // Sandboxes outlive close(): what the suite left is killed before its directory goes.
          for (const s of await provider.list())
            await (await provider.resume(s.sandboxId)).kill().catch(() => undefined);
          await provider.close();
          await rm(baseDir, { recursive: true, force: true });
        },
      };
    },
    {
      platform: {
        provider: "local",
        // Lifetimes are the record's, enforced by the provider's reaper and on every lookup.
        ttl: true,
        idleTimeout: true,
        // Host processes: no cgroup delegation to limit them with, no image to choose.
        cpu: false,
        memory: false,
        disk: false,
        template: false,
        // bubblewrap unshares the network namespace and binds mounts; without it, the sandbox
        // is the host's processes and can do neither. No per-destination filter either way.
        networkDeny: isolation === "bwrap",
        networkInternet: true,
        networkAllow: false,
        mounts: isolation === "bwrap",
        expiresAt: true,
        ttlEnforced: true,
        memoryEnforced: false,
        isolationVisible: isolation === "bwrap",
      },
      skipReason:
        isolation === "bwrap" && !bwrap ? "bubblewrap is not available on this machine" : undefined,
    },
  );
}
