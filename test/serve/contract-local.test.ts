/**
 * The SDK contract suite through the kubernetes provider pointed at `sandpit serve --backend
 * local`: the provider speaks only the provisioner's native API, so this is that API, proxy,
 * pause/resume, port tunnels and terminals included, as the SDK uses it.
 */
import { bwrapAvailable } from "../../sdk/src/providers/local/bwrap.ts";
import { contractSuite } from "../contract/suite.ts";
import { serveContractTarget } from "./harness.ts";

const bwrap = await bwrapAvailable();

contractSuite(
  "kubernetes provider → sandpit serve (local)",
  () => serveContractTarget(["--backend", "local"]),
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
