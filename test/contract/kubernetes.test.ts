/**
 * The contract suite on the kubernetes provider: the real operator and provisioner (as
 * processes, out of cluster) against the real cluster, the SDK talking only to the provisioner.
 */
import { inject } from "vitest";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import { startStack } from "../cluster/harness.ts";
import { contractSuite } from "./suite.ts";

contractSuite(
  "kubernetes",
  async () => {
    const stack = await startStack({
      kubeconfig: inject("kubeconfig"),
      image: inject("clusterSandboxImage"),
      prefix: "contract",
    });
    const provider = new KubernetesProvider({
      provisionerUrl: stack.prov.url,
      apiKey: stack.prov.apiKey,
    });
    return {
      provider,
      // The sandbox's data volume is 1Gi, and the test cluster's storage holds a volume to its
      // size (a filesystem of its own, whose metadata takes some of it): a file that fits.
      streamBytes: 768 * 1024 * 1024,
      teardown: stack.stop,
    };
  },
  {
    platform: {
      provider: "kubernetes",
      // ttlSeconds and idleTimeoutSeconds on the Sandbox, through the native API.
      ttl: true,
      idleTimeout: true,
      cpu: true,
      memory: true,
      disk: true,
      // A SandboxPool.
      template: true,
      networkDeny: true,
      // The platform's network policy applies; a sandbox can only ask for deny.
      networkInternet: false,
      networkAllow: false,
      // Claims are shared by the namespace's tenants; mounts come from the pool.
      mounts: false,
      expiresAt: true,
      // Lifetimes are at least 60 s on Kubernetes.
      ttlEnforced: false,
      memoryEnforced: false,
      isolationVisible: false,
    },
  },
);
