/**
 * The contract suite on the kubernetes provider: the real operator and provisioner (as
 * processes, out of cluster) against the real cluster, the SDK talking only to the provisioner.
 */
import { inject } from "vitest";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import { startStack } from "../cluster/harness.ts";
import { contractSuite } from "./suite.ts";

contractSuite("kubernetes", async () => {
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
    streamBytes: 1024 * 1024 * 1024,
    teardown: stack.stop,
  };
});
