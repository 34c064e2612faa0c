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

contractSuite("kubernetes provider → sandpit serve (local)", async () => {
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
});
