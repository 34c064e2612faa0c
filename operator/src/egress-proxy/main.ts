/**
 * The egress proxy's entry point (image `sandpit-egress`, chart `egressProxy`): the proxy on
 * SANDPIT_EGRESS_LISTEN (default 0.0.0.0:3128), /healthz, /readyz and /metrics on
 * SANDPIT_PROBE_ADDRESS (default 0.0.0.0:8081). It reads, never writes: the sandboxes' pods,
 * Sandboxes and SandboxPools (whose pod an address is, and what it may reach), and the cluster's
 * own addresses (Nodes, the API server's EndpointSlices), which it refuses like the Internet
 * policy does. Out of cluster: SANDPIT_KUBECONFIG or KUBECONFIG.
 */
import { pino } from "pino";
import { Counter, Registry, collectDefaultMetrics } from "prom-client";
import { z } from "zod";
import { HOST_PORT_PATTERN, HOST_PORT_RULE } from "../api/rules.ts";
import { cidrList } from "../config.ts";
import { LABEL, MANAGED_BY } from "../api/labels.ts";
import { POOLS, SANDBOXES, type Sandbox, type SandboxPool } from "../api/v1alpha1.ts";
import { Informer } from "../kube/informer.ts";
import {
  ENDPOINT_SLICES,
  type EndpointSlice,
  NODES,
  type Node,
  PODS,
  type Pod,
} from "../kube/resources.ts";
import { Kube, type KObject, loadKubeConfig } from "../kube/rest.ts";
import * as transforms from "../kube/transforms.ts";
import { BLOCKED_CIDRS, inCidr, ipv4, nodeAddresses, sliceAddresses } from "../workload/egress.ts";
import { listen, probeServer } from "../probes.ts";
import { allowanceOf } from "./allowances.ts";
import { type Decision, createProxyServer } from "./server.ts";

const Env = z.object({
  SANDPIT_KUBECONFIG: z.string().optional(),
  /** The sandboxes' namespace; every namespace when unset (as the operator's). */
  SANDPIT_WATCH_NAMESPACE: z.string().optional(),
  SANDPIT_EGRESS_LISTEN: z
    .string()
    .regex(HOST_PORT_PATTERN, HOST_PORT_RULE)
    .default("0.0.0.0:3128"),
  SANDPIT_PROBE_ADDRESS: z
    .string()
    .regex(HOST_PORT_PATTERN, HOST_PORT_RULE)
    .default("0.0.0.0:8081"),
  /** What the cluster does not report and no sandbox may reach (the operator's setting). */
  SANDPIT_EGRESS_EXCLUDE_CIDRS: cidrList(),
  SANDPIT_LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace"]).default("info"),
});

const parsed = Env.safeParse(process.env);
if (!parsed.success) {
  const lines = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
  process.stderr.write(`invalid egress proxy settings:\n  ${lines.join("\n  ")}\n`);
  process.exit(2);
}
const cfg = parsed.data;
const log = pino({ level: cfg.SANDPIT_LOG_LEVEL, base: { component: "sandpit-egress" } });
const kube = new Kube(loadKubeConfig(cfg.SANDPIT_KUBECONFIG), { fieldManager: "sandpit-egress" });
const ns = cfg.SANDPIT_WATCH_NAMESPACE;
const informer = <T extends KObject>(
  resource: typeof PODS,
  transform: transforms.Transform<T>,
  opts: { labelSelector?: string; namespace?: string | undefined } = {},
) =>
  new Informer<T>(kube, {
    resource,
    logger: log,
    transform,
    ...(opts.namespace ? { namespace: opts.namespace } : {}),
    ...(opts.labelSelector ? { labelSelector: opts.labelSelector } : {}),
  });
const caches = {
  // Every pod the operator made: sandboxes' and pools' warm pods (allowances.ts).
  pods: informer<Pod>(PODS, transforms.pod, {
    labelSelector: `${LABEL.managedBy}=${MANAGED_BY.operator}`,
    namespace: ns,
  }),
  sandboxes: informer<Sandbox>(SANDBOXES, transforms.specAndStatus, { namespace: ns }),
  pools: informer<SandboxPool>(POOLS, transforms.specAndStatus, { namespace: ns }),
  nodes: informer<Node>(NODES, transforms.node),
  apiServer: informer<EndpointSlice>(ENDPOINT_SLICES, transforms.endpointSlice, {
    labelSelector: "kubernetes.io/service-name=kubernetes",
    namespace: "default",
  }),
};
const all = Object.values(caches) as Informer<KObject>[];

/** The ranges the Internet policy excludes, and the cluster's own addresses, read live. */
function blocked(address: string): boolean {
  const n = ipv4(address);
  if (n === undefined) return true; // IPv4 only: the pod network's family
  if ([...BLOCKED_CIDRS, ...cfg.SANDPIT_EGRESS_EXCLUDE_CIDRS].some((c) => inCidr(n, c)))
    return true;
  const own = [
    ...caches.nodes.list().flatMap(nodeAddresses),
    ...caches.apiServer.list().flatMap(sliceAddresses),
  ];
  return own.includes(address);
}

const registry = new Registry();
collectDefaultMetrics({ register: registry });
const decisions = new Counter({
  name: "sandpit_egress_connections_total",
  help: "Connections through the egress proxy, by outcome: allowed, refused (a rule), failed (the destination).",
  labelNames: ["decision"],
  registers: [registry],
});
for (const d of ["allowed", "refused", "failed"]) decisions.inc({ decision: d }, 0);

const proxy = createProxyServer({
  allowanceOf: (address) => allowanceOf(caches, address),
  blocked,
  log,
  onDecision: (d: Decision) => decisions.inc({ decision: d }),
});

const probes = probeServer({ informers: all, registry });

for (const i of all) i.start();
await listen(probes, cfg.SANDPIT_PROBE_ADDRESS);
// Until every cache is filled no address is known and every connection would be refused: the
// proxy listens only once they are, and /readyz (its Service's readiness) says so meanwhile.
await Promise.all(all.map((i) => i.synced));
await listen(proxy, cfg.SANDPIT_EGRESS_LISTEN);
log.info({ listen: cfg.SANDPIT_EGRESS_LISTEN }, "egress proxy ready");

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => {
    for (const i of all) i.stop();
    proxy.close();
    probes.close();
    // Open tunnels are cut: their clients see a closed connection and retry elsewhere.
    proxy.closeAllConnections();
    setTimeout(() => process.exit(0), 100).unref();
  });
}
