/**
 * What the chart suites share: Helm (the one test/cluster/build.sh builds) run against the test
 * cluster, and the values every release installed there needs.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { machineAddressCidrs } from "../cluster/addresses.ts";
import { chartImageArgs } from "../cluster/images.ts";

const run = promisify(execFile);
const ROOT = new URL("../../", import.meta.url).pathname;
export const CHART = `${ROOT}charts/sandpit`;

/** build.sh's bin directory (helm, traefik, coredns, ...): built or reused from the cache. */
export async function clusterBin(): Promise<string> {
  const { stdout } = await run(`${ROOT}test/cluster/build.sh`, [], { timeout: 30 * 60_000 });
  return stdout.trim();
}

/** A helm runner: resolves with stdout, rejects with helm's stderr in the message. */
export function helmRunner(bin: string, kubeconfig: string, id: string) {
  return async (...args: string[]): Promise<string> => {
    try {
      const { stdout } = await run(`${bin}/helm`, args, {
        env: { ...process.env, KUBECONFIG: kubeconfig, HELM_CACHE_HOME: `/tmp/sandpit-helm-${id}` },
        maxBuffer: 32 << 20,
        timeout: 600_000,
      });
      return stdout;
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      throw new Error(`helm ${args.slice(0, 2).join(" ")}: ${e.stderr || e.message}`, {
        cause: err,
      });
    }
  };
}

/** The images built here, and a sandbox namespace of the release's own, watched by it alone. */
export const releaseValues = (
  images: { operator: string; provisioner: string; sandbox: string; egress: string },
  sandboxNs: string,
) => [
  ...chartImageArgs(images),
  "--set",
  `sandboxes.namespace=${sandboxNs}`,
  "--set",
  `operator.watchNamespace=${sandboxNs}`,
  // The test cluster's DNS is a host process on the node address, not a kube-dns pod.
  "--set-json",
  'sandboxes.dnsCidrs=["10.244.0.1/32"]',
  // The node's addresses its Node object does not list (cluster/addresses.ts).
  "--set-json",
  `sandboxes.egressExcludeCidrs=${JSON.stringify(machineAddressCidrs())}`,
];
