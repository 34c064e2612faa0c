/**
 * The provisioner's settings, from SANDPIT_* environment variables, validated strictly: a typo
 * or a malformed key list stops it at start-up with a message naming the variable.
 */
import { readFileSync } from "node:fs";
import {
  BoundQuantities,
  HOST_PORT_PATTERN,
  HOST_PORT_RULE,
  Mount,
  type PlatformBounds,
  platformBoundsFrom,
} from "@sandpit/operator/api";
import { z } from "zod";

/** One API key: who it belongs to (tenant), and how many sandboxes it may hold at once. */
export const ApiKey = z.strictObject({
  key: z.string().min(24, "API keys are at least 24 characters"),
  tenant: z
    .string()
    .regex(
      /^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$/,
      "tenant: lowercase letters, digits and '-', at most 32",
    ),
  maxSandboxes: z.number().int().min(1).default(100),
  /** The longest timeout an E2B client may ask for (24 h when not set, as on E2B Pro). */
  maxTimeoutSeconds: z
    .number()
    .int()
    .min(60)
    .max(30 * 24 * 3600)
    .optional(),
  /**
   * Ceilings for this key's sandboxes (cpu, memory, ephemeralStorage, disk): they lower the
   * pool's and the platform's, never raise them.
   */
  maxResources: BoundQuantities("This key's ceiling").optional(),
});
export type ApiKey = z.infer<typeof ApiKey>;

const Env = z.object({
  SANDPIT_KUBECONFIG: z.string().optional(),
  /** Where sandboxes live. */
  SANDPIT_NAMESPACE: z.string().min(1).default("sandpit-sandboxes"),
  /** Pool used when a create names none; none means a standalone Sandbox. */
  SANDPIT_DEFAULT_POOL: z.string().optional(),
  /** JSON list of {key, tenant, maxSandboxes}; or SANDPIT_API_KEYS_FILE pointing at one. */
  SANDPIT_API_KEYS: z.string().optional(),
  SANDPIT_API_KEYS_FILE: z.string().optional(),
  SANDPIT_LISTEN: z.string().regex(HOST_PORT_PATTERN, HOST_PORT_RULE).default("0.0.0.0:8080"),
  /**
   * host:port of /metrics, a port of its own: what an Ingress or a port-forward of the API
   * exposes never includes the service's internals.
   */
  SANDPIT_METRICS_LISTEN: z
    .string()
    .regex(HOST_PORT_PATTERN, HOST_PORT_RULE)
    .default("0.0.0.0:9090"),
  /** Base URL clients reach this service at, for the URLs it hands out. */
  SANDPIT_PUBLIC_URL: z.string().url().optional(),
  /** How long a create waits for Ready before answering 504. */
  SANDPIT_READY_TIMEOUT_MS: z.coerce.number().int().min(1000).default(120_000),
  /** At most one activity write per sandbox per this period (docs/operations.md#provisioner). */
  SANDPIT_ACTIVITY_INTERVAL_MS: z.coerce.number().int().min(1000).default(15_000),
  /**
   * After SIGTERM: how long to go on serving, unready, before closing. Kubernetes removes a
   * terminating pod from its Service while the signal is sent; until every node's proxy has
   * caught up, new connections still arrive and must not be refused.
   */
  SANDPIT_SHUTDOWN_DELAY_MS: z.coerce.number().int().min(0).max(60_000).default(5_000),
  SANDPIT_MAX_BODY_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .default(1024 * 1024),
  /**
   * Warm pods this replica holds per pool it serves, for creates that answer without waiting on
   * the API server (docs/architecture.md, "The warm create"); 0 turns the fast path off.
   */
  SANDPIT_WARM_RESERVATION: z.coerce.number().int().min(0).max(1000).default(2),
  /** How long this replica's reservations outlive it if it dies without releasing them. */
  SANDPIT_RESERVATION_LEASE_SECONDS: z.coerce.number().int().min(3).max(300).default(15),
  SANDPIT_LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace"]).default("info"),
  /**
   * JSON object: a container path DeerFlow asks for in extra_mounts -> the claim mounted there,
   * {claimName, subPath?, readOnly?}. A path not named here is given an empty directory.
   */
  SANDPIT_DEERFLOW_MOUNTS: z.string().optional(),
  /**
   * The key envd access tokens are derived from (docs/e2b.md): the same on every replica, so
   * each verifies the others' tokens. Unset: the E2B-compatible API is off.
   */
  SANDPIT_E2B_TOKEN_SECRET: z
    .string()
    .min(32, "at least 32 characters (the chart generates one)")
    .optional(),
  /**
   * The key DeerFlow sandbox_url capabilities are derived from (provisioner/src/capability.ts):
   * the same on every replica. Unset: a random one per process (URLs change on restart).
   */
  SANDPIT_CAPABILITY_KEY: z
    .string()
    .min(32, "at least 32 characters (the chart generates one)")
    .optional(),
  /** The domain of E2B's host routing: api.<domain> and <port>-<sandboxId>.<domain>. */
  SANDPIT_E2B_DOMAIN: z
    .string()
    .regex(
      /^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/,
      "a lowercase DNS name such as sandboxes.example.com",
    )
    .optional(),
});

export interface ProvisionerConfig {
  kubeconfig: string | undefined;
  namespace: string;
  defaultPool: string | undefined;
  keys: ApiKey[];
  listen: { host: string; port: number };
  /** Where /metrics is served; undefined: not served (`sandpit serve`). */
  metricsListen: { host: string; port: number } | undefined;
  publicUrl: string | undefined;
  readyTimeoutMs: number;
  activityIntervalMs: number;
  shutdownDelayMs: number;
  maxBodyBytes: number;
  logLevel: string;
  /** Key of the DeerFlow capabilities; undefined: the app makes a random one. */
  capabilityKey: Buffer | undefined;
  /** Warm pods held per pool (0: no fast path) and the holder Lease's duration. */
  reservation: { size: number; leaseSeconds: number };
  /** Resource floors and ceilings where a pool sets none (SANDPIT_MIN_* / SANDPIT_MAX_*). */
  bounds: PlatformBounds;
  /** The volumes DeerFlow's extra_mounts are mapped to, one per container path. */
  deerflowMounts: Mount[];
  /** The E2B-compatible API (docs/e2b.md); undefined: off. */
  e2b: { tokenSecret: string; domain: string | undefined } | undefined;
}

function hostPort(address: string): { host: string; port: number } {
  const at = address.lastIndexOf(":");
  return { host: address.slice(0, at) || "0.0.0.0", port: Number(address.slice(at + 1)) };
}

export function readConfig(env: NodeJS.ProcessEnv): ProvisionerConfig {
  const parsed = Env.safeParse(env);
  const fail = (lines: string[]): never => {
    throw new Error(`invalid provisioner settings:\n  ${lines.join("\n  ")}`);
  };
  const bounds = platformBoundsFrom(env);
  if (!parsed.success || bounds.problems.length)
    fail([
      ...(parsed.error?.issues.map((i) => `${i.path.join(".")}: ${i.message}`) ?? []),
      ...bounds.problems,
    ]);
  const e = parsed.data!;
  let rawKeys = e.SANDPIT_API_KEYS;
  if (e.SANDPIT_API_KEYS_FILE) rawKeys = readFileSync(e.SANDPIT_API_KEYS_FILE, "utf8");
  if (!rawKeys)
    fail(["SANDPIT_API_KEYS: no API keys: every route but the health checks needs one"]);
  let json: unknown;
  try {
    json = JSON.parse(rawKeys!);
  } catch (err) {
    fail([`SANDPIT_API_KEYS: must be a JSON list: ${(err as Error).message}`]);
  }
  const keys = z.array(ApiKey).min(1).safeParse(json);
  if (!keys.success)
    fail(keys.error.issues.map((i) => `SANDPIT_API_KEYS[${i.path.join(".")}]: ${i.message}`));
  const deerflowMounts = e.SANDPIT_DEERFLOW_MOUNTS
    ? parseDeerflowMounts(e.SANDPIT_DEERFLOW_MOUNTS, fail)
    : [];
  if (e.SANDPIT_E2B_DOMAIN && !e.SANDPIT_E2B_TOKEN_SECRET)
    fail(["SANDPIT_E2B_DOMAIN: the E2B API needs SANDPIT_E2B_TOKEN_SECRET too"]);
  return {
    kubeconfig: e.SANDPIT_KUBECONFIG,
    namespace: e.SANDPIT_NAMESPACE,
    defaultPool: e.SANDPIT_DEFAULT_POOL,
    keys: keys.data!,
    listen: hostPort(e.SANDPIT_LISTEN),
    metricsListen: hostPort(e.SANDPIT_METRICS_LISTEN),
    publicUrl: e.SANDPIT_PUBLIC_URL?.replace(/\/$/, ""),
    readyTimeoutMs: e.SANDPIT_READY_TIMEOUT_MS,
    activityIntervalMs: e.SANDPIT_ACTIVITY_INTERVAL_MS,
    shutdownDelayMs: e.SANDPIT_SHUTDOWN_DELAY_MS,
    maxBodyBytes: e.SANDPIT_MAX_BODY_BYTES,
    logLevel: e.SANDPIT_LOG_LEVEL,
    capabilityKey: e.SANDPIT_CAPABILITY_KEY ? Buffer.from(e.SANDPIT_CAPABILITY_KEY) : undefined,
    reservation: {
      size: e.SANDPIT_WARM_RESERVATION,
      leaseSeconds: e.SANDPIT_RESERVATION_LEASE_SECONDS,
    },
    bounds: bounds.bounds,
    deerflowMounts,
    e2b: e.SANDPIT_E2B_TOKEN_SECRET
      ? { tokenSecret: e.SANDPIT_E2B_TOKEN_SECRET, domain: e.SANDPIT_E2B_DOMAIN }
      : undefined,
  };
}

/**
 * SANDPIT_DEERFLOW_MOUNTS, each entry checked by the operator's own Mount rule (the key is its
 * mountPath), so a mapping the Sandbox would refuse stops the provisioner rather than every create.
 */
function parseDeerflowMounts(raw: string, fail: (lines: string[]) => never): Mount[] {
  const NAME = "SANDPIT_DEERFLOW_MOUNTS";
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch (err) {
    fail([`${NAME}: must be a JSON object: ${(err as Error).message}`]);
  }
  const byPath = z.record(z.string(), z.record(z.string(), z.unknown())).safeParse(json);
  if (!byPath.success)
    fail([`${NAME}: must be a JSON object of container path -> {claimName, subPath?, readOnly?}`]);
  const problems: string[] = [];
  const mounts: Mount[] = [];
  for (const [mountPath, target] of Object.entries(byPath.data!)) {
    const m = Mount.safeParse({ ...target, mountPath });
    if (m.success) mounts.push(m.data);
    else
      problems.push(
        ...m.error.issues.map(
          (i) =>
            `${NAME}[${mountPath}]${i.path.map((k) => `.${String(k)}`).join("")}: ${i.message}`,
        ),
      );
  }
  if (problems.length) fail(problems);
  return mounts;
}
