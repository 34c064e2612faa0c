/**
 * The operator's settings, read from SANDPIT_* environment variables (what a Deployment sets and
 * a developer exports) and validated strictly, so a typo stops it at start-up with a message.
 */
import { isIP } from "node:net";
import { hostname } from "node:os";
import { z } from "zod";
import { type PlatformBounds, platformBoundsFrom } from "./api/bounds.ts";
import { HOST_PORT_PATTERN, HOST_PORT_RULE } from "./api/rules.ts";

const json = <T extends z.ZodType>(schema: T) =>
  z.string().transform((s, ctx): z.infer<T> => {
    try {
      return schema.parse(JSON.parse(s));
    } catch (err) {
      ctx.addIssue({ code: "custom", message: `must be JSON: ${(err as Error).message}` });
      return z.NEVER;
    }
  });

/** A comma-separated list, each item trimmed, empty ones dropped. */
const commaList = () =>
  z
    .string()
    .default("")
    .transform((s) =>
      s
        .split(",")
        .map((c) => c.trim())
        .filter(Boolean),
    );

const OCTET = "(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])";
/** An IPv4 range a NetworkPolicy may except from 0.0.0.0/0: a prefix of 1 to 32 bits. */
const IPV4_CIDR = new RegExp(`^${OCTET}(\\.${OCTET}){3}/([1-9]|[12][0-9]|3[0-2])$`);
/** A comma-separated list of IPv4 ranges (SANDPIT_EGRESS_EXCLUDE_CIDRS, here and in the proxy). */
export const cidrList = () =>
  commaList().refine((list) => list.every((c) => IPV4_CIDR.test(c)), {
    message: "each is an IPv4 range such as 192.0.2.0/24",
  });

/** host:port, an IPv6 host in brackets (what sandboxd's SANDBOXD_ISOLATION_PROBE takes). */
const HOST_PORT = /^(\[[0-9a-fA-F:.]+\]|[^:\s]+):\d{1,5}$/;

const Toleration = z.object({
  key: z.string().optional(),
  operator: z.enum(["Exists", "Equal"]).optional(),
  value: z.string().optional(),
  effect: z.enum(["NoSchedule", "PreferNoSchedule", "NoExecute"]).optional(),
});

const Env = z.object({
  /** Kubeconfig file; in-cluster service account (or KUBECONFIG) when unset. */
  SANDPIT_KUBECONFIG: z.string().optional(),
  /** Watch one namespace only; every namespace when unset. */
  SANDPIT_WATCH_NAMESPACE: z.string().optional(),
  /** Namespace of the provisioner and operator: the only source sandbox ingress accepts. */
  SANDPIT_SYSTEM_NAMESPACE: z.string().default("sandpit-system"),
  SANDPIT_SANDBOX_IMAGE: z.string().min(1).default("sandpit.local/sandbox:latest"),
  SANDPIT_IMAGE_PULL_POLICY: z.enum(["Always", "IfNotPresent", "Never"]).default("IfNotPresent"),
  /** The lifetime of a sandbox that sets no TTL: nothing lives forever by accident. */
  SANDPIT_DEFAULT_TTL_SECONDS: z.coerce
    .number()
    .int()
    .min(60)
    .default(24 * 3600),
  SANDPIT_DEFAULT_CPU: z.string().default("1"),
  SANDPIT_DEFAULT_MEMORY: z.string().default("1Gi"),
  SANDPIT_DEFAULT_EPHEMERAL_STORAGE: z.string().default("2Gi"),
  /** What a sandbox reserves on its node; limits are what it may use. */
  SANDPIT_CPU_REQUEST: z.string().default("50m"),
  SANDPIT_MEMORY_REQUEST: z.string().default("64Mi"),
  SANDPIT_EPHEMERAL_STORAGE_REQUEST: z.string().default("64Mi"),
  /** Where pods may resolve names: CIDRs of the cluster's resolvers (port 53 only). */
  SANDPIT_DNS_CIDRS: commaList(),
  /**
   * IPv4 ranges Internet egress excludes besides the private ones and the nodes' and API
   * server's addresses the cluster reports: what it does not (a node's other interfaces, a load
   * balancer in front of the API server, an on-premises metadata service).
   */
  SANDPIT_EGRESS_EXCLUDE_CIDRS: cidrList(),
  /**
   * A server every sandbox's network policy refuses, which answers when reachable: sandboxd
   * connects to it until it no longer can, and a sandbox is Ready only then, so no code runs
   * before the cluster's NetworkPolicy enforcer has programmed the pod (docs/security.md).
   * `apiserver` (the default): the API server's endpoint, read from its EndpointSlice; a
   * host:port; or `off` (clusters that enforce no NetworkPolicy: nothing isolates the pods).
   */
  SANDPIT_POLICY_PROBE: z
    .string()
    .default("apiserver")
    .refine((s) => s === "apiserver" || s === "off" || HOST_PORT.test(s), {
      message: "apiserver, off, or host:port (an IPv6 address in brackets)",
    }),
  /**
   * The egress proxy (image sandpit-egress) as host:port: its Service's name (resolved once at
   * start, by the operator's resolver: sandboxes get its address, never a name, as they have no
   * DNS) or address. Its pods are those named sandpit-egress (app.kubernetes.io/name) in the
   * system namespace, listening on that port. Unset: a sandbox with network.allowDomains fails
   * with EgressProxyNotConfigured.
   */
  SANDPIT_EGRESS_PROXY: z.string().regex(HOST_PORT, "host:port").optional(),
  /**
   * StorageClasses trusted to hold a claim at its size besides those annotated
   * sandpit.dev/enforces-capacity: "true" (the Sandbox's DiskEnforced condition).
   */
  SANDPIT_CAPACITY_ENFORCING_CLASSES: commaList(),
  SANDPIT_POD_NODE_SELECTOR: json(z.record(z.string(), z.string())).default({}),
  SANDPIT_POD_TOLERATIONS: json(z.array(Toleration)).default([]),
  /** Failed or vanished pods are recreated this many times (with backoff) before Failed. */
  SANDPIT_MAX_RECREATIONS: z.coerce.number().int().min(0).default(5),
  SANDPIT_SANDBOX_WORKERS: z.coerce.number().int().min(1).default(32),
  SANDPIT_POOL_WORKERS: z.coerce.number().int().min(1).default(4),
  /** host:port of /healthz, /readyz and /metrics. */
  SANDPIT_PROBE_ADDRESS: z
    .string()
    .regex(HOST_PORT_PATTERN, HOST_PORT_RULE)
    .default("0.0.0.0:8081"),
  SANDPIT_LEADER_ELECTION: z
    .enum(["true", "false"])
    .default("true")
    .transform((v) => v === "true"),
  SANDPIT_LEADER_ELECTION_NAMESPACE: z.string().optional(),
  SANDPIT_LEASE_NAME: z.string().default("sandpit-operator"),
  /** Unique per process; the pod name in a cluster. */
  SANDPIT_IDENTITY: z.string().optional(),
  SANDPIT_LEASE_DURATION_MS: z.coerce.number().int().min(1000).default(15_000),
  SANDPIT_RENEW_DEADLINE_MS: z.coerce.number().int().min(500).default(10_000),
  SANDPIT_RETRY_PERIOD_MS: z.coerce.number().int().min(100).default(2_000),
  SANDPIT_LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace"]).default("info"),
});

export interface OperatorConfig {
  kubeconfig: string | undefined;
  watchNamespace: string | undefined;
  systemNamespace: string;
  image: string;
  imagePullPolicy: "Always" | "IfNotPresent" | "Never";
  defaultTtlSeconds: number;
  defaultLimits: { cpu: string; memory: string; ephemeralStorage: string };
  requests: { cpu: string; memory: string; ephemeralStorage: string };
  /** Floors and ceilings for pools without their own (SANDPIT_MIN_* / SANDPIT_MAX_*). */
  bounds: PlatformBounds;
  dnsCidrs: string[];
  egressExcludeCidrs: string[];
  /**
   * SANDPIT_EGRESS_PROXY, split; `address` is what sandboxes are given (ip:port), filled in by
   * the manager at start when `host` is a name.
   */
  egressProxy: { host: string; port: number; address?: string } | undefined;
  /** SANDPIT_POLICY_PROBE: "apiserver", "off" or host:port. */
  policyProbe: string;
  /** StorageClasses trusted to enforce a claim's size, besides the annotated ones. */
  capacityEnforcingClasses: string[];
  podNodeSelector: Record<string, string>;
  podTolerations: z.infer<typeof Toleration>[];
  maxRecreations: number;
  sandboxWorkers: number;
  poolWorkers: number;
  probeAddress: string;
  leaderElection: {
    enabled: boolean;
    namespace: string;
    name: string;
    identity: string;
    leaseDurationMs: number;
    renewDeadlineMs: number;
    retryPeriodMs: number;
  };
  logLevel: string;
}

export function readConfig(env: NodeJS.ProcessEnv): OperatorConfig {
  const parsed = Env.safeParse(env);
  const bounds = platformBoundsFrom(env);
  if (!parsed.success || bounds.problems.length) {
    const lines = [
      ...(parsed.error?.issues.map((i) => `${i.path.join(".")}: ${i.message}`) ?? []),
      ...bounds.problems,
    ];
    throw new Error(`invalid operator settings:\n  ${lines.join("\n  ")}`);
  }
  const e = parsed.data;
  return {
    kubeconfig: e.SANDPIT_KUBECONFIG,
    watchNamespace: e.SANDPIT_WATCH_NAMESPACE,
    systemNamespace: e.SANDPIT_SYSTEM_NAMESPACE,
    image: e.SANDPIT_SANDBOX_IMAGE,
    imagePullPolicy: e.SANDPIT_IMAGE_PULL_POLICY,
    defaultTtlSeconds: e.SANDPIT_DEFAULT_TTL_SECONDS,
    defaultLimits: {
      cpu: e.SANDPIT_DEFAULT_CPU,
      memory: e.SANDPIT_DEFAULT_MEMORY,
      ephemeralStorage: e.SANDPIT_DEFAULT_EPHEMERAL_STORAGE,
    },
    requests: {
      cpu: e.SANDPIT_CPU_REQUEST,
      memory: e.SANDPIT_MEMORY_REQUEST,
      ephemeralStorage: e.SANDPIT_EPHEMERAL_STORAGE_REQUEST,
    },
    bounds: bounds.bounds,
    dnsCidrs: e.SANDPIT_DNS_CIDRS,
    egressExcludeCidrs: e.SANDPIT_EGRESS_EXCLUDE_CIDRS,
    egressProxy: e.SANDPIT_EGRESS_PROXY ? splitHostPort(e.SANDPIT_EGRESS_PROXY) : undefined,
    policyProbe: e.SANDPIT_POLICY_PROBE,
    capacityEnforcingClasses: e.SANDPIT_CAPACITY_ENFORCING_CLASSES,
    podNodeSelector: e.SANDPIT_POD_NODE_SELECTOR,
    podTolerations: e.SANDPIT_POD_TOLERATIONS,
    maxRecreations: e.SANDPIT_MAX_RECREATIONS,
    sandboxWorkers: e.SANDPIT_SANDBOX_WORKERS,
    poolWorkers: e.SANDPIT_POOL_WORKERS,
    probeAddress: e.SANDPIT_PROBE_ADDRESS,
    leaderElection: {
      enabled: e.SANDPIT_LEADER_ELECTION,
      namespace: e.SANDPIT_LEADER_ELECTION_NAMESPACE ?? e.SANDPIT_SYSTEM_NAMESPACE,
      name: e.SANDPIT_LEASE_NAME,
      identity: e.SANDPIT_IDENTITY ?? `${hostname()}_${process.pid}`,
      leaseDurationMs: e.SANDPIT_LEASE_DURATION_MS,
      renewDeadlineMs: e.SANDPIT_RENEW_DEADLINE_MS,
      retryPeriodMs: e.SANDPIT_RETRY_PERIOD_MS,
    },
    logLevel: e.SANDPIT_LOG_LEVEL,
  };
}

function splitHostPort(s: string): { host: string; port: number; address?: string } {
  const i = s.lastIndexOf(":");
  const host = s.slice(0, i).replace(/^\[|\]$/g, "");
  const port = Number(s.slice(i + 1));
  return isIP(host) ? { host, port, address: s } : { host, port };
}
