/** Checks SandboxCreateOptions once, for every provider, before anything is created. */
import { ID_PATTERN, ID_RULE, LANGUAGES, PackageSpecs } from "@sandpit/sandboxd/protocol";
import { z } from "zod";
import { parseOptions } from "./parse-options.ts";
import type { SandboxCreateOptions } from "./types.ts";

/**
 * Labels must survive every backend unchanged, so they follow the strictest: Kubernetes label
 * syntax (Docker labels, E2B metadata and Daytona labels all accept it). Keys starting with
 * `sandpit` or `app.kubernetes.io/` are Sandpit's own (user, thread, tenant, ...).
 */
const LABEL_KEY = /^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/;
const RESERVED_LABEL = /^(sandpit|app\.kubernetes\.io\/)/i;

export const Labels = z
  .record(
    z
      .string()
      .regex(LABEL_KEY, "label keys are [prefix/]name, name 1-63 of [A-Za-z0-9-_.]")
      .refine((k) => !RESERVED_LABEL.test(k), "label keys starting with sandpit or app.kubernetes.io/ are reserved"),
    z.string().regex(LABEL_VALUE, "label values are 0-63 of [A-Za-z0-9-_.], alphanumeric at both ends"),
  )
  .refine((l) => Object.keys(l).length <= 32, "at most 32 labels");

const DAY_MS = 24 * 3600_000;
const lifetimeMs = (what: string) =>
  z
    .number()
    .int(`${what} is whole milliseconds`)
    .min(1_000, `${what} is at least 1000 ms`)
    .max(30 * DAY_MS, `${what} is at most 30 days`);

export const TimeoutMs = lifetimeMs("timeoutMs");

/** Where a mount may not go: the sandbox's own data, Sandpit's code and the system's directories. */
const RESERVED_TARGETS = ["/mnt/user-data", "/tmp", "/proc", "/dev", "/sys", "/run", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/opt/sandpit"];
const overlaps = (p: string, r: string) => p === r || p.startsWith(`${r}/`) || r.startsWith(`${p}/`);

const absolutePath = z
  .string()
  .regex(/^\/[^\0]*$/, "an absolute path")
  .refine((p) => !p.split("/").some((s) => s === "." || s === ".."), "no '.' or '..' segments");

const CreateOptions = z.object({
  language: z.enum(LANGUAGES, {
    error: (i) => `unknown language ${JSON.stringify(i.input)}: use "python" or "typescript"`,
  }),
  packages: PackageSpecs.optional(),
  envs: z.record(z.string(), z.string()).optional(),
  workingDirectory: z.string().min(1).optional(),
  timeoutMs: z.number().int().positive().optional(),
  // User and thread IDs end up in names and paths, so they are kept to a safe alphabet.
  threadId: z.string().regex(ID_PATTERN, `threadId must be ${ID_RULE}`).optional(),
  userId: z.string().regex(ID_PATTERN, `userId must be ${ID_RULE}`).optional(),
  lifetime: z
    .strictObject({ ttlMs: lifetimeMs("ttlMs").optional(), idleTimeoutMs: lifetimeMs("idleTimeoutMs").optional() })
    .refine(
      (l) => l.ttlMs === undefined || l.idleTimeoutMs === undefined || l.idleTimeoutMs <= l.ttlMs,
      "idleTimeoutMs cannot be longer than ttlMs",
    )
    .optional(),
  resources: z
    .strictObject({
      cpu: z.number().positive("cpu is a positive number of cores").max(256).optional(),
      memoryMiB: z.number().int().min(16, "memoryMiB is at least 16").max(1 << 22).optional(),
      diskMiB: z.number().int().min(16, "diskMiB is at least 16").max(1 << 24).optional(),
    })
    .optional(),
  template: z.string().min(1).max(512).optional(),
  labels: Labels.optional(),
  network: z
    .union([
      z.literal("deny"),
      z.literal("internet"),
      z.strictObject({
        allow: z
          .array(z.string().regex(/^[A-Za-z0-9.:/-]{1,253}$/, "a host name, an address or a CIDR"))
          .min(1, "network.allow lists at least one destination")
          .max(64),
      }),
    ], { error: () => 'network is "deny", "internet" or {allow: [hosts or CIDRs]}' })
    .optional(),
  mounts: z
    .array(
      z.strictObject({
        source: z.string().min(1).max(4096),
        target: absolutePath
          .max(512)
          .refine((p) => p !== "/" && !RESERVED_TARGETS.some((r) => overlaps(p.replace(/\/+$/, ""), r)), {
            error: `mount targets may not cover, lie under or contain ${RESERVED_TARGETS.join(", ")}`,
          }),
        readOnly: z.boolean().optional(),
      }),
    )
    .max(16)
    .refine(
      (ms) => new Set(ms.map((m) => m.target)).size === ms.length,
      "each mount has its own target",
    )
    .optional(),
});

/** Create options are checked before anything touches the disk. */
export function validateCreate(options: SandboxCreateOptions): SandboxCreateOptions {
  return parseOptions(CreateOptions, options, "create options");
}

/** The list options' labels, checked like create's. */
export function validateListLabels(labels: unknown): Record<string, string> {
  return parseOptions(Labels.optional(), labels, "list options") ?? {};
}

/** A new lifetime for setTimeout. */
export function validateTimeout(timeoutMs: unknown): number {
  return parseOptions(TimeoutMs, timeoutMs, "setTimeout");
}
