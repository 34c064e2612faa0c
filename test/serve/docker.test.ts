/**
 * `sandpit serve --backend docker` as a child process, on the engine and image of the docker
 * project's global setup: the provisioner's API suites (test/serve/api-suite.ts), and the SDK
 * contract suite through the kubernetes provider pointed at it.
 */
import { contractSuite } from "../contract/suite.ts";
import { serveApiSuite } from "./api-suite.ts";
import { dockerLeftovers, dockerServeArgs, dockerServeEnv } from "./docker-backend.ts";
import { serveContractTarget } from "./harness.ts";

serveApiSuite("docker", {
  args: dockerServeArgs(),
  supports: { resources: true, networkDeny: true },
  leftovers: dockerLeftovers,
  env: dockerServeEnv(),
});

contractSuite(
  "kubernetes provider → sandpit serve (docker)",
  () => serveContractTarget(dockerServeArgs(), dockerServeEnv()),
  {
    // What serve carries out of create's platform options on Docker (the kubernetes provider
    // refuses, before asking, what the native API has no field for: network "internet", an
    // allow list, mounts).
    platform: {
      provider: "kubernetes",
      // serve's reaper deletes at the TTL, and the Docker provider holds the same end.
      ttl: true,
      // serve's reaper pauses after the timeout without traffic through its proxy.
      idleTimeout: true,
      // Container limits (the Docker provider's resources).
      cpu: true,
      memory: true,
      // Refused with NOT_SUPPORTED: the Docker data volume's driver has no size limit.
      disk: false,
      // Refused with NOT_SUPPORTED: serve has no SandboxPools, only the image it runs.
      template: false,
      // A container without a network (the Docker provider's network "deny").
      networkDeny: true,
      networkInternet: false,
      networkAllow: false,
      mounts: false,
      expiresAt: true,
      // The native API's shortest TTL is 60 s: a seconds-scale lifetime is refused (400).
      ttlEnforced: false,
      // A container's memory limit is the kernel's: the 400 MiB allocation is killed.
      memoryEnforced: true,
      // Needs mounts, which the kubernetes provider refuses.
      isolationVisible: false,
    },
  },
);
