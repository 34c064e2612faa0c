/**
 * What the E2B API keeps on a Sandbox, and how it reads E2B's facts back from one. Everything is
 * on the resource (annotations and spec), so every replica answers alike; a sandbox made through
 * the native API reads as one made from its pool's template, with no metadata.
 */
import { type Sandbox, type SandboxPool, quantityValue } from "@sandpit/operator/api";
import type { SandboxState } from "./schemas.ts";

export const E2B_ANNOTATION = {
  /** The templateID the sandbox was created from, as the caller named it. */
  template: "sandpit.dev/e2b-template",
  /** E2B metadata, a JSON object of strings (annotations take any key and value). */
  metadata: "sandpit.dev/e2b-metadata",
  /** "pause": suspended, not deleted, at the end of its timeout (E2B's autoPause). */
  onTimeout: "sandpit.dev/e2b-on-timeout",
  /** "true": traffic to a paused sandbox resumes it (E2B's autoResume). */
  autoResume: "sandpit.dev/e2b-auto-resume",
} as const;

/** The shortest lifetime or idle timeout a Sandbox takes (its CRD's minimum). */
export const MIN_LIFETIME_S = 60;
/**
 * The operator's own defaults (operator/src/config.ts), for a sandbox whose spec and pool set
 * none: what its pod gets, so what getInfo reports.
 */
const OPERATOR_DEFAULTS = { cpu: "1", memory: "1Gi", storage: "1Gi", ttlSeconds: 24 * 3600 };

const annotation = (s: Sandbox, key: string) => s.metadata.annotations?.[key];

export function templateOf(s: Sandbox): string {
  return annotation(s, E2B_ANNOTATION.template) ?? s.spec.poolRef ?? "base";
}

export function metadataOf(s: Sandbox): Record<string, string> {
  const raw = annotation(s, E2B_ANNOTATION.metadata);
  if (!raw) return {};
  try {
    const parsed: unknown = JSON.parse(raw);
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return {};
    return Object.fromEntries(
      Object.entries(parsed).filter((e): e is [string, string] => typeof e[1] === "string"),
    );
  } catch {
    return {}; // edited by hand into something else: no metadata rather than an error
  }
}

export const autoPauses = (s: Sandbox) => annotation(s, E2B_ANNOTATION.onTimeout) === "pause";
export const autoResumes = (s: Sandbox) => annotation(s, E2B_ANNOTATION.autoResume) === "true";

/** Paused when asked to be (spec) or when the operator suspended it (idle, LRU eviction). */
export function stateOf(s: Sandbox): SandboxState {
  return s.spec.lifecycle?.suspended || s.status?.phase === "Suspended" ? "paused" : "running";
}

export const startedAt = (s: Sandbox) => new Date(s.metadata.creationTimestamp ?? Date.now());

/**
 * When the sandbox's timeout ends it. From the spec where the spec decides (so an answer right
 * after a change already shows it, before the operator's status does): creation + ttlSeconds,
 * or, for an auto-pausing sandbox, its last activity + idleTimeoutSeconds.
 */
export function endAt(s: Sandbox): Date {
  const created = startedAt(s).getTime();
  const lc = s.spec.lifecycle;
  if (autoPauses(s) && lc?.idleTimeoutSeconds !== undefined) {
    const since = Date.parse(s.status?.lastActivityTime ?? s.status?.readyAt ?? "") || created;
    return new Date(since + lc.idleTimeoutSeconds * 1000);
  }
  if (lc?.ttlSeconds !== undefined) return new Date(created + lc.ttlSeconds * 1000);
  if (s.status?.expiresAt) return new Date(s.status.expiresAt);
  return new Date(created + OPERATOR_DEFAULTS.ttlSeconds * 1000);
}

/** CPUs, memory and disk as E2B reports them: the sandbox's, else its pool's, else defaults. */
export function resourcesOf(
  s: Sandbox,
  pool: SandboxPool | undefined,
): { cpuCount: number; memoryMB: number; diskSizeMB: number } {
  const t = pool?.spec.template;
  const cpu = s.spec.resources?.cpu ?? t?.resources?.cpu ?? OPERATOR_DEFAULTS.cpu;
  const memory = s.spec.resources?.memory ?? t?.resources?.memory ?? OPERATOR_DEFAULTS.memory;
  const disk = s.spec.storage?.size ?? t?.storage?.size ?? OPERATOR_DEFAULTS.storage;
  return {
    cpuCount: Math.max(1, Math.ceil(quantity(cpu))),
    memoryMB: Math.round(quantity(memory) / 2 ** 20),
    diskSizeMB: Math.round(quantity(disk) / 2 ** 20),
  };
}

/** A Kubernetes quantity as a number (500m → 0.5, 1Gi → 2^30); 0 for one edited by hand into another form. */
export function quantity(q: string): number {
  try {
    return quantityValue(q);
  } catch {
    return 0;
  }
}
