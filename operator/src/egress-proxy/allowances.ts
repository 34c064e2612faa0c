/**
 * Which domains the connection from an address may reach: the address is a sandbox's pod (its
 * `sandpit.dev/sandbox` label, set by the operator when it makes or adopts the pod), and the
 * domains are that Sandbox's effective `network.allowDomains` (its own network, else its pool
 * template's), read from the same objects the operator builds the NetworkPolicy from; or a
 * pool's warm pod, with its template's. Nothing
 * the sandbox says is believed: not a header, not a credential, only where the packet came from,
 * which a pod without NET_RAW cannot forge and the pod network routes.
 */
import type { Sandbox, SandboxPool } from "../api/v1alpha1.ts";
import { LABEL } from "../api/labels.ts";
import type { Pod } from "../kube/resources.ts";

export interface Allowance {
  /** Whose the address is, for messages and logs: "sandbox ns/name" or "warm pod ns/pod of pool p". */
  holder: string;
  /** Its allowed domain patterns (api/domains.ts); empty: nothing through the proxy. */
  domains: readonly string[];
}

/** The caches the answer is read from (kube/informer.ts, or plain lists in tests). */
export interface AllowanceSources {
  pods: { list(): Pod[] };
  sandboxes: { get(name: string, namespace?: string): Sandbox | undefined };
  pools: { get(name: string, namespace?: string): SandboxPool | undefined };
}

type Network = NonNullable<Sandbox["spec"]["network"]>;
const domainsOf = (network: Network | undefined) =>
  network?.egress === "Allowlist" ? (network.allowDomains ?? []) : [];

/**
 * The allowance of the pod at `address`, or undefined when no live sandbox or warm pod has it.
 * Pods that are terminating or finished are skipped: their address may already be another
 * pod's. Two live pods with one address (a cache that has not seen a deletion yet) answer
 * nothing rather than guess. A warm pod, which runs no tenant's code yet, gets its pool
 * template's domains: it installs the template's packages through them.
 */
export function allowanceOf(src: AllowanceSources, address: string): Allowance | undefined {
  let found: Pod | undefined;
  for (const p of src.pods.list()) {
    if (p.status?.podIP !== address || p.metadata.deletionTimestamp) continue;
    if (p.status.phase === "Succeeded" || p.status.phase === "Failed") continue;
    if (found) return undefined;
    found = p;
  }
  if (!found) return undefined;
  const { namespace: ns, labels = {}, ownerReferences = [] } = found.metadata;
  // The pod must be its owner's own (a namesake's pod left from a deleted object is not).
  const ownedBy = (o: { metadata: { uid?: string } } | undefined) =>
    !!o && ownerReferences.some((r) => r.uid === o.metadata.uid);
  const name = labels[LABEL.sandbox];
  if (name) {
    const sbx = src.sandboxes.get(name, ns);
    if (!ownedBy(sbx)) return undefined;
    const pool = sbx!.spec.poolRef ? src.pools.get(sbx!.spec.poolRef, ns) : undefined;
    return {
      holder: `sandbox ${ns}/${name}`,
      domains: domainsOf(sbx!.spec.network ?? pool?.spec.template.network),
    };
  }
  const poolName = labels[LABEL.pool];
  if (poolName && labels[LABEL.warm] === "true") {
    const pool = src.pools.get(poolName, ns);
    if (!ownedBy(pool)) return undefined;
    return {
      holder: `warm pod ${ns}/${found.metadata.name} of pool ${poolName}`,
      domains: domainsOf(pool!.spec.template.network),
    };
  }
  return undefined;
}
