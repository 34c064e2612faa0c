/**
 * A sandbox's effective spec: its own fields, then its pool's template, then the operator's
 * defaults. Every decision about a sandbox or a warm pod is made from this, never from the raw
 * spec.
 */
import { createHash } from "node:crypto";
import { boundsProblem, resolveBounds } from "../api/bounds.ts";
import type { Mount, SandboxPoolSpec, SandboxSpec, SharedClaim } from "../api/v1alpha1.ts";
import type { OperatorConfig } from "../config.ts";

type Template = SandboxPoolSpec["template"];

/** A sandbox's spec with its pool's template and the operator's defaults filled in. */
export interface Effective {
  image: string;
  language: "python" | "typescript";
  packages: { name: string; version?: string | undefined }[];
  env: Record<string, string>;
  limits: { cpu: string; memory: string; ephemeralStorage: string };
  storage: {
    size: string;
    storageClassName?: string | undefined;
    /** /mnt/user-data from a directory of this claim instead of a claim of the pod's own. */
    sharedClaim?: SharedClaim | undefined;
  };
  /** The pool's mounts, then the sandbox's (one at the same path replaces the pool's). */
  mounts: Mount[];
  network: NonNullable<SandboxSpec["network"]>;
  ttlSeconds: number;
  idleTimeoutSeconds: number | undefined;
  suspended: boolean;
  runtimeClassName: string | undefined;
  emptyDirs: string[];
}

export function effectiveSpec(
  spec: Partial<Template> & { lifecycle?: SandboxSpec["lifecycle"] },
  pool: SandboxPoolSpec | undefined,
  cfg: OperatorConfig,
): Effective {
  const t: Partial<Template> = pool?.template ?? {};
  const env: Record<string, string> = {};
  for (const e of t.env ?? []) env[e.name] = e.value;
  for (const e of spec.env ?? []) env[e.name] = e.value;
  const network = spec.network ?? t.network ?? { egress: "Internet" as const };
  // Last: a sandbox's own HTTPS_PROXY would lead nowhere, its policy reaches only this one.
  if (usesEgressProxy(network) && cfg.egressProxy?.address)
    Object.assign(env, proxyEnv(cfg.egressProxy.address));
  const mounts = new Map<string, Mount>();
  for (const m of [...(t.mounts ?? []), ...(spec.mounts ?? [])]) mounts.set(m.mountPath, m);
  return {
    image: spec.image ?? t.image ?? cfg.image,
    language: spec.language ?? t.language ?? "python",
    packages: spec.packages ?? t.packages ?? [],
    env,
    limits: {
      cpu: spec.resources?.cpu ?? t.resources?.cpu ?? cfg.defaultLimits.cpu,
      memory: spec.resources?.memory ?? t.resources?.memory ?? cfg.defaultLimits.memory,
      ephemeralStorage:
        spec.resources?.ephemeralStorage ??
        t.resources?.ephemeralStorage ??
        cfg.defaultLimits.ephemeralStorage,
    },
    storage: {
      size: spec.storage?.size ?? t.storage?.size ?? "1Gi",
      storageClassName: spec.storage?.storageClassName ?? t.storage?.storageClassName,
      sharedClaim: spec.storage?.sharedClaim ?? t.storage?.sharedClaim,
    },
    mounts: [...mounts.values()],
    network,
    ttlSeconds:
      spec.lifecycle?.ttlSeconds ??
      t.lifecycle?.ttlSeconds ??
      pool?.defaultTtlSeconds ??
      cfg.defaultTtlSeconds,
    idleTimeoutSeconds:
      spec.lifecycle?.idleTimeoutSeconds ??
      t.lifecycle?.idleTimeoutSeconds ??
      pool?.defaultIdleTimeoutSeconds,
    suspended: spec.lifecycle?.suspended ?? false,
    runtimeClassName: spec.runtimeClassName ?? t.runtimeClassName,
    emptyDirs: spec.emptyDirs ?? t.emptyDirs ?? [],
  };
}

/**
 * Why a sandbox's effective limits and disk break its pool's bounds (or the platform's), or
 * undefined: such a sandbox is never started, nor a warm pod of such a template made.
 */
export function boundsViolation(
  e: Effective,
  pool: SandboxPoolSpec | undefined,
  cfg: OperatorConfig,
): string | undefined {
  return boundsProblem(
    {
      ...e.limits,
      // A shared claim's size is its owner's business; the sandbox makes no claim of its own.
      ...(e.storage.sharedClaim ? {} : { disk: e.storage.size }),
    },
    resolveBounds(pool?.resourceBounds, cfg.bounds),
  );
}

/** Why the platform will not start a sandbox with this effective spec, or undefined. */
export function notStartableReason(
  e: Effective,
  pool: SandboxPoolSpec | undefined,
  cfg: OperatorConfig,
): { reason: string; message: string } | undefined {
  const outOfBounds = boundsViolation(e, pool, cfg);
  if (outOfBounds) return { reason: "ResourcesOutOfBounds", message: outOfBounds };
  if (usesEgressProxy(e.network) && !cfg.egressProxy) {
    return {
      reason: "EgressProxyNotConfigured",
      message:
        "network.allowDomains needs the egress proxy, and this operator has none (SANDPIT_EGRESS_PROXY; chart egressProxy.enabled)",
    };
  }
  return undefined;
}

/** Whether a sandbox with `network` reaches domains through the egress proxy. */
export const usesEgressProxy = (network: NonNullable<SandboxSpec["network"]>) =>
  network.egress === "Allowlist" && (network.allowDomains?.length ?? 0) > 0;

/**
 * What makes pip, npm, curl, Python's urllib and requests, and Node (NODE_USE_ENV_PROXY, for
 * fetch and http) go through the egress proxy: both spellings, as each tool reads one of them.
 */
export function proxyEnv(address: string): Record<string, string> {
  const url = `http://${address}`;
  const local = "localhost,127.0.0.1,::1";
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    NO_PROXY: local,
    no_proxy: local,
    NODE_USE_ENV_PROXY: "1",
  };
}

export const hashOf = (value: unknown) =>
  createHash("sha256").update(JSON.stringify(value)).digest("hex").slice(0, 16);

/** What shapes a Pod; a warm pod can serve a sandbox only when these match. */
export function podShape(e: Effective) {
  return {
    image: e.image,
    limits: e.limits,
    storage: e.storage,
    runtimeClassName: e.runtimeClassName ?? null,
    // /tmp is memory-backed (workload/manifests.ts tmpSize): warm pods made before, whose /tmp
    // is on the node's disk, no longer match, and their pools replace them.
    tmp: "memory",
    // A pod's volumes cannot change once it exists. Each joins the shape only when present,
    // so the shapes of pods without them stay what they were.
    ...(e.mounts.length > 0 ? { mounts: e.mounts } : {}),
    ...(e.emptyDirs.length > 0 ? { emptyDirs: e.emptyDirs } : {}),
  };
}

/**
 * Whether a pod for `e` can be made before its sandbox exists, to be adopted: not when the
 * sandbox's user or thread decides what it mounts (a shared user-data directory, a subPath
 * naming {user} or {thread}). Such sandboxes start cold and their pools keep no warm pods.
 */
export function warmable(e: Effective): boolean {
  return !e.storage.sharedClaim && !e.mounts.some((m) => /\{(user|thread)\}/.test(m.subPath ?? ""));
}

/** The hash of what a pod is made of; a warm pod serves sandboxes whose shape matches it. */
export const shapeHash = (e: Effective) => hashOf(podShape(e));
