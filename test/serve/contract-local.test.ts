/**
 * The SDK contract suite through the kubernetes provider pointed at `sandpit serve --backend
 * local`: the provider speaks only the provisioner's native API, so this is that API, proxy,
 * pause/resume, port tunnels and terminals included, as the SDK uses it.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import { bwrapAvailable } from "../../sdk/src/providers/local/bwrap.ts";
import { contractSuite } from "../contract/suite.ts";
import { KEYS, KEY_LIST, startServe, removeState } from "./harness.ts";

const bwrap = await bwrapAvailable();

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
        await removeState(stateDir);
      },
    };
  },
  {
    // What serve carries out of create's platform options on local (the kubernetes provider
    // refuses, before asking, what the native API has no field for: network "internet", an
    // allow list, mounts).
    platform: {
      provider: "kubernetes",
      // serve's reaper deletes at the TTL, and the local provider's record holds the same end.
      ttl: true,
      // serve's reaper pauses after the timeout without traffic through its proxy.
      idleTimeout: true,
      // Refused with NOT_SUPPORTED: local sandboxes are host processes, no cgroup limits them.
      cpu: false,
      memory: false,
      disk: false,
      // Refused with NOT_SUPPORTED: serve has no SandboxPools.
      template: false,
      // A private network namespace: only with bubblewrap (else refused with NOT_SUPPORTED).
      networkDeny: bwrap,
      networkInternet: false,
      networkAllow: false,
      mounts: false,
      expiresAt: true,
      // The native API's shortest TTL is 60 s: a seconds-scale lifetime is refused (400).
      ttlEnforced: false,
      memoryEnforced: false,
      // Needs mounts, which the kubernetes provider refuses.
      isolationVisible: false,
    },
  },
);
