/**
 * The NetworkPolicies that isolate a namespace's sandboxes, as pure functions. They are shared,
 * not one per sandbox: a sandbox's start then writes none (the burst of 200 cold sandboxes made
 * the node's policy enforcer re-sync 200 policies, one per pod), and a cold start costs four API
 * writes instead of five.
 *
 * - The namespace's isolation policy selects every pod carrying LABEL.network (every sandbox pod
 *   and warm pod has it from birth): ingress only from the provisioner and operator pods of the
 *   system namespace, to sandboxd, and no egress. It is what a pod gets when nothing else
 *   selects it: a pod is never open, whatever happens to the policy below.
 * - One egress policy per network key: the key (networkKey) names what a network lets a pod
 *   reach, and the pods whose LABEL.network is that key get it, in addition (policies are
 *   additive). A network that reaches nothing (Deny) has no egress policy at all.
 *
 * What a network reaches:
 * - `Internet`: every IPv4 address but the private and special ranges, `clusterAddresses` (the
 *   nodes' and the API server's own, egress.ts) and SANDPIT_EGRESS_EXCLUDE_CIDRS (what the
 *   cluster does not report), plus DNS to the cluster's resolvers;
 * - `Deny`: nothing at all, DNS included: a resolver that forwards external names is a channel
 *   out (data in the names looked up), so a Deny sandbox gets no resolver;
 * - `Allowlist`: the listed ranges, plus DNS only when `network.dns` asks for it, plus the
 *   egress proxy's pods on its port when `network.allowDomains` lists domains (the proxy decides
 *   which names; the pod itself reaches no other address by them).
 */
import { SANDBOXD_PORT } from "@sandpit/sandboxd/protocol";
import { ANNOTATION, EGRESS_PROXY_NAME, LABEL } from "../api/labels.ts";
import type { OperatorConfig } from "../config.ts";
import type { KObject } from "../kube/rest.ts";
import { BLOCKED_CIDRS } from "./egress.ts";
import { metadata } from "./manifests.ts";
import { type Effective, hashOf } from "./spec.ts";

type Network = Effective["network"];

/** The namespace's isolation policy's name. */
export const ISOLATION_POLICY = "sandpit-isolation";

/** The name of the egress policy of a network key. */
export const egressPolicyName = (key: string) => `sandpit-egress-${key}`;

/**
 * The network key of a pod with `network`: the hash of the egress rules it gets, as they would
 * be without the cluster's own addresses. Networks that reach the same places share a key (and
 * a policy); the cluster's addresses changing rewrites each egress policy, never a pod's label.
 */
export const networkKey = (network: Network, cfg: OperatorConfig): string =>
  hashOf(egressRules(network, cfg, []));

function egressRules(network: Network, cfg: OperatorConfig, clusterAddresses: readonly string[]) {
  const dns = {
    to: [
      {
        namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "kube-system" } },
        podSelector: { matchLabels: { "k8s-app": "kube-dns" } },
      },
      ...cfg.dnsCidrs.map((cidr) => ({ ipBlock: { cidr } })),
    ],
    ports: [
      { protocol: "UDP", port: 53 },
      { protocol: "TCP", port: 53 },
    ],
  };
  const egress: unknown[] = [];
  if (network.egress === "Internet") {
    egress.push(dns, {
      to: [
        {
          ipBlock: {
            cidr: "0.0.0.0/0",
            // Each once: a node may report an address the settings name too.
            except: [
              ...new Set([...BLOCKED_CIDRS, ...cfg.egressExcludeCidrs, ...clusterAddresses]),
            ],
          },
        },
      ],
    });
  } else if (network.egress === "Allowlist") {
    if (network.dns) egress.push(dns);
    // Domains are reached through the egress proxy's pods, and only on its port.
    if (network.allowDomains?.length && cfg.egressProxy) {
      egress.push({
        to: [
          {
            namespaceSelector: {
              matchLabels: { "kubernetes.io/metadata.name": cfg.systemNamespace },
            },
            podSelector: { matchLabels: { [LABEL.name]: EGRESS_PROXY_NAME } },
          },
        ],
        ports: [{ protocol: "TCP", port: cfg.egressProxy.port }],
      });
    }
    for (const rule of network.allow ?? []) {
      egress.push({
        to: [{ ipBlock: { cidr: rule.cidr } }],
        ...(rule.ports?.length
          ? { ports: rule.ports.map((port) => ({ protocol: "TCP", port })) }
          : {}),
      });
    }
  }
  return egress;
}

const policy = (namespace: string, name: string, labels: Record<string, string>, spec: object) => ({
  apiVersion: "networking.k8s.io/v1",
  kind: "NetworkPolicy",
  metadata: metadata({ name, namespace, labels }, { [ANNOTATION.specHash]: hashOf(spec) }),
  spec,
});

/** Ingress from the provisioner and operator only, no egress, for every pod with a network key. */
export function isolationPolicy(namespace: string, cfg: OperatorConfig): KObject {
  return policy(
    namespace,
    ISOLATION_POLICY,
    {},
    {
      podSelector: { matchExpressions: [{ key: LABEL.network, operator: "Exists" }] },
      policyTypes: ["Ingress", "Egress"],
      ingress: [
        {
          from: [
            {
              namespaceSelector: {
                matchLabels: { "kubernetes.io/metadata.name": cfg.systemNamespace },
              },
              podSelector: {
                matchExpressions: [
                  {
                    key: LABEL.name,
                    operator: "In",
                    values: ["sandpit-provisioner", "sandpit-operator"],
                  },
                ],
              },
            },
          ],
          ports: [{ protocol: "TCP", port: SANDBOXD_PORT }],
        },
      ],
      egress: [],
    },
  );
}

/**
 * What pods with `network` may reach, for those carrying its key; undefined when they may reach
 * nothing (the isolation policy already says so).
 */
export function egressPolicy(
  namespace: string,
  network: Network,
  cfg: OperatorConfig,
  clusterAddresses: readonly string[],
): KObject | undefined {
  const egress = egressRules(network, cfg, clusterAddresses);
  if (egress.length === 0) return undefined;
  const key = networkKey(network, cfg);
  return policy(
    namespace,
    egressPolicyName(key),
    { [LABEL.network]: key },
    {
      podSelector: { matchLabels: { [LABEL.network]: key } },
      policyTypes: ["Egress"],
      egress,
    },
  );
}
