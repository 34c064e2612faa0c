/**
 * The SDK contract suite through the kubernetes provider pointed at `sandpit serve --backend
 * local`: the provider speaks only the provisioner's native API, so this is that API, proxy,
 * pause/resume, port tunnels and terminals included, as the SDK uses it.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import { contractSuite } from "../contract/suite.ts";
import { KEYS, KEY_LIST, startServe } from "./harness.ts";

contractSuite(
  "kubernetes provider → sandpit serve (local)",
  async () => {
    const stateDir = await mkdtemp(join(tmpdir(), "sandpit-serve-contract-"));
    // Package installs (pandas, matplotlib) on a cold pip cache take minutes.
    const serve = await startServe(["--backend", "local", "--state-dir", stateDir], {
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
