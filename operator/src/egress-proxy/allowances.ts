/**
 * Which domains the connection from an address may reach: the address is a sandbox's pod (its
 * `sandpit.dev/sandbox` label, set by the operator when it makes or adopts the pod), and the
 * domains are that Sandbox's effective `network.allowDomains` (its own network, else its pool
 * template's), read from the same objects the operator builds the NetworkPolicy from. Nothing
 * the sandbox says is believed: not a header, not a credential, only where the packet came from,
 * which a pod without NET_RAW cannot forge and the pod network routes.
 */
import type { Sandbox, SandboxPool } from "../api/v1alpha1.ts";
import { LABEL } from "../api/labels.ts";
import type { Pod } from "../kube/resources.ts";

export interface Allowance {
  /** namespace/name of the Sandbox the address belongs to. */
  sandbox: string;
  /** Its allowed domain patterns (api/domains.ts); empty: nothing through the proxy. */
  domains: readonly string[];
}

/** The caches the answer is read from (kube/informer.ts, or plain lists in tests). */
export interface AllowanceSources {
  pods: { list(): Pod[] };
  sandboxes: { get(name: string, namespace?: string): Sandbox | undefined };
  pools: { get(name: string, namespace?: string): SandboxPool | undefined };
}

/**
 * The allowance of the pod at `address`, or undefined when no live sandbox pod has it. Pods
 * that are terminating or finished are skipped: their address may already be another pod's.
 * Two live pods with one address (a cache that has not seen a deletion yet) answer nothing
 * rather than guess.
 */
export function allowanceOf(src: AllowanceSources, address: string): Allowance | undefined {
  let found: Pod | undefined;
  for (const p of src.pods.list()) {
    if (p.status?.podIP !== address || p.metadata.deletionTimestamp) continue;
    if (p.status.phase === "Succeeded" || p.status.phase === "Failed") continue;
    if (found) return undefined;
    found = p;
  }
  const name = found?.metadata.labels?.[LABEL.sandbox];
  if (!found || !name) return undefined;
  const ns = found.metadata.namespace;
  const sbx = src.sandboxes.get(name, ns);
  // The pod must be the sandbox's own (a namesake's pod left from a deleted Sandbox is not).
  if (!sbx || !found.metadata.ownerReferences?.some((o) => o.uid === sbx.metadata.uid)) return;
  const pool = sbx.spec.poolRef ? src.pools.get(sbx.spec.poolRef, ns) : undefined;
  const network = sbx.spec.network ?? pool?.spec.template.network;
  const domains = network?.egress === "Allowlist" ? (network.allowDomains ?? []) : [];
  return { sandbox: `${ns}/${name}`, domains };
}
