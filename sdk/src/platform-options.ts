/**
 * The platform part of create (lifetime, resources, template, labels, network, mounts) as each
 * provider can honour it. A provider states what its backend does; whatever a caller asks for
 * beyond that is refused with NOT_SUPPORTED naming the option and the provider, before
 * anything is created, so no option is ever silently dropped.
 */
import { notSupported } from "./unsupported.ts";
import type { SandboxCreateOptions } from "./types.ts";

export interface PlatformSupport {
  ttl?: boolean;
  idleTimeout?: boolean;
  cpu?: boolean;
  memory?: boolean;
  disk?: boolean;
  template?: boolean;
  labels?: boolean;
  networkDeny?: boolean;
  networkInternet?: boolean;
  networkAllow?: boolean;
  mounts?: boolean;
  /** Mounts that are read-only (a backend may have mounts but no read-only flag). */
  readOnlyMounts?: boolean;
}

/** Throws NOT_SUPPORTED for the first option in `o` the backend cannot honour. */
export function refuseUnsupported(
  provider: string,
  o: SandboxCreateOptions,
  can: PlatformSupport,
  /** Why, when the refusal needs a reason (e.g. "without bubblewrap"). */
  why: Partial<Record<keyof PlatformSupport, string>> = {},
): void {
  const check = (asked: unknown, key: keyof PlatformSupport, option: string) => {
    if (asked !== undefined && asked !== false && !can[key]) {
      const reason = why[key];
      throw notSupported(provider, `the create option ${option}${reason ? ` (${reason})` : ""}`);
    }
  };
  check(o.lifetime?.ttlMs, "ttl", "lifetime.ttlMs");
  check(o.lifetime?.idleTimeoutMs, "idleTimeout", "lifetime.idleTimeoutMs");
  check(o.resources?.cpu, "cpu", "resources.cpu");
  check(o.resources?.memoryMiB, "memory", "resources.memoryMiB");
  check(o.resources?.diskMiB, "disk", "resources.diskMiB");
  check(o.template, "template", "template");
  check(o.labels && Object.keys(o.labels).length ? true : undefined, "labels", "labels");
  check(o.network === "deny" || undefined, "networkDeny", 'network "deny"');
  check(o.network === "internet" || undefined, "networkInternet", 'network "internet"');
  check(typeof o.network === "object" || undefined, "networkAllow", "network.allow");
  check(o.mounts?.length ? true : undefined, "mounts", "mounts");
  check(o.mounts?.some((m) => m.readOnly) || undefined, "readOnlyMounts", "mounts[].readOnly");
}

/** Whether `labels` carry every one of `wanted`. */
export function hasLabels(labels: Record<string, string>, wanted: Record<string, string>): boolean {
  return Object.entries(wanted).every(([k, v]) => labels[k] === v);
}

/** A backend's labels without Sandpit's own (user, thread, tenant, bookkeeping). */
export function userLabels(all: Record<string, string> | undefined): Record<string, string> {
  return Object.fromEntries(
    Object.entries(all ?? {}).filter(([k]) => !/^(sandpit|app\.kubernetes\.io\/)/i.test(k)),
  );
}
