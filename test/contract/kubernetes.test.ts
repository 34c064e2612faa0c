/**
 * The contract suite on the kubernetes provider: the real operator and provisioner (as
 * processes, out of cluster) against the real cluster, the SDK talking only to the provisioner.
 */
import { inject } from "vitest";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import {
  clients,
  createNamespace,
  deleteNamespace,
  ensureCrds,
  startOperator,
  startProvisioner,
} from "../operator/harness.ts";
import { contractSuite } from "./suite.ts";

contractSuite("kubernetes", async () => {
  const kubeconfig = inject("kubeconfig");
  const c = clients(kubeconfig);
  await ensureCrds(c);
  const ns = await createNamespace(c, "contract");
  const operator = await startOperator({
    kubeconfig,
    namespace: ns,
    image: inject("clusterSandboxImage"),
  });
  const provisioner = await startProvisioner({ kubeconfig, namespace: ns });
  const provider = new KubernetesProvider({
    provisionerUrl: provisioner.url,
    apiKey: provisioner.apiKey,
  });
  return {
    provider,
    teardown: async () => {
      await provisioner.stop();
      await operator.stop();
      await deleteNamespace(c, ns);
    },
  };
});
