/**
 * The `sandpit.dev/v1alpha1` API (docs/api/sandbox.md): the one source of truth for the Sandbox and
 * SandboxPool types. The CRDs in crds/ are generated from these schemas (`npm run crds`), with
 * every description, default and CEL rule, and a test fails when the two drift apart.
 */
import { ENV_NAME_PATTERN, ENV_NAME_RULE, ID_PATTERN, ID_RULE } from "@sandpit/sandboxd/protocol";
import { z } from "zod";
import type { KObject, Resource } from "../kube/rest.ts";
import { DOMAIN_PATTERN } from "./domains.ts";
import {
  CLAIM_NAME_PATTERN,
  CLAIM_NAME_RULE,
  MOUNT_PATH_PATTERN,
  MOUNT_PATH_RULE,
  POSITIVE_QUANTITY_RULE,
  Port,
  QUANTITY_PATTERN,
  QUANTITY_RULE,
  RESERVED_MOUNT_PATHS,
  SUB_PATH_PATTERN,
  SUB_PATH_RULE,
  ZERO_QUANTITY_PATTERN,
  hasDotSegment,
  reservedMountPath,
} from "./rules.ts";

export const GROUP = "sandpit.dev";
export const VERSION = "v1alpha1";

/** A CEL rule checked by the API server; messages are what a user sees on a rejected apply. */
const cel = (rule: string, message: string) => ({ rule, message });

/**
 * A positive quantity: the API server refuses a zero (CEL), since Kubernetes reads a zero limit
 * as none at all.
 */
const quantity = (what: string) =>
  z
    .string()
    .max(64)
    .regex(QUANTITY_PATTERN, `${what} is ${QUANTITY_RULE}`)
    .refine((q) => !ZERO_QUANTITY_PATTERN.test(q), `${what} is ${POSITIVE_QUANTITY_RULE}`)
    .meta({
      "x-kubernetes-validations": [
        cel(
          `!self.matches('${ZERO_QUANTITY_PATTERN.source}')`,
          `${what} is ${POSITIVE_QUANTITY_RULE}`,
        ),
      ],
    })
    .describe(`${what}, as a Kubernetes quantity above zero (for example 500m, 1, 512Mi, 2Gi).`);

/** One quantity per bounded dimension (operator/src/api/bounds.ts), each optional. */
export const BoundQuantities = (side: string) =>
  z
    .strictObject({
      cpu: quantity(`${side} CPU limit`).optional(),
      memory: quantity(`${side} memory limit`).optional(),
      ephemeralStorage: quantity(`${side} ephemeral storage limit`).optional(),
      disk: quantity(`${side} size of the volume at /mnt/user-data (storage.size)`).optional(),
    })
    .describe(`${side} of each dimension; the platform's applies to a dimension left out.`);

export const ResourceBounds = z
  .strictObject({
    min: BoundQuantities("Floor").optional(),
    max: BoundQuantities("Ceiling").optional(),
  })
  .describe(
    "Floors and ceilings of the pool's sandboxes' resources, its template's included: a create asking for more or less is refused (400 naming the bound), and a Sandbox outside them is Failed with reason ResourcesOutOfBounds and never started. Each dimension left out keeps the platform's bound (the operator's and provisioner's SANDPIT_MIN_* and SANDPIT_MAX_*).",
  );

export const Package = z
  .strictObject({
    name: z
      .string()
      .min(1)
      .max(200)
      .describe("Package name, installed with pip (python) or npm (typescript)."),
    version: z
      .string()
      .min(1)
      .max(100)
      .optional()
      .describe("Version or version range; latest when omitted."),
  })
  .describe("A package installed into the sandbox before it reports Ready.");

export const EnvVar = z
  .strictObject({
    name: z.string().regex(ENV_NAME_PATTERN, ENV_NAME_RULE).describe("Variable name."),
    value: z.string().max(32768).describe("Variable value."),
  })
  .describe("An environment variable every process in the sandbox sees.");

export const Resources = z
  .strictObject({
    cpu: quantity("CPU limit").optional(),
    memory: quantity("Memory limit").optional(),
    ephemeralStorage: quantity(
      "Ephemeral storage limit (root filesystem, logs and the directories of emptyDirs; /tmp is a tmpfs counted against memory)",
    ).optional(),
  })
  .describe(
    "Resource limits of the sandbox container; the operator's defaults apply to what is omitted.",
  );

const claimName = (what: string) =>
  z
    .string()
    .max(253)
    .regex(CLAIM_NAME_PATTERN, `claimName is ${CLAIM_NAME_RULE}`)
    .describe(`${what}: an existing PersistentVolumeClaim in the sandbox's namespace.`);

/** CEL: the path in `field` (relative when `relative`) has no '.' or '..' segment. */
const noDotSegments = (field: string, relative: boolean) => {
  const path = relative ? `'/' + self.${field} + '/'` : `self.${field} + '/'`;
  return `!(${path}).contains('/./') && !(${path}).contains('/../')`;
};

const subPath = (what: string) =>
  z
    .string()
    .min(1)
    .max(512)
    .regex(SUB_PATH_PATTERN, `subPath is ${SUB_PATH_RULE}`)
    .refine((p) => !hasDotSegment(p), "subPath has no '.' or '..' segments")
    .describe(
      `${what}, relative to the claim's root. {user} and {thread} stand for the sandbox's userId and threadId; a sandbox without the one its subPath names is not started (reason InvalidMounts) rather than given the whole claim.`,
    );

const subPathRule = cel(
  `!has(self.subPath) || ${noDotSegments("subPath", true)}`,
  "subPath has no '.' or '..' segments",
);

export const SharedClaim = z
  .strictObject({
    claimName: claimName("Claim holding every sandbox's user data"),
    subPath: subPath("This sandbox's directory in the claim, mounted at /mnt/user-data"),
  })
  .meta({ "x-kubernetes-validations": [subPathRule] })
  .describe(
    "/mnt/user-data as a directory of an existing shared claim (for example users/{user}/threads/{thread}/user-data) instead of a claim of the sandbox's own: whoever else mounts the claim sees the sandbox's files as they are written. No <pod>-data claim is made, size and storageClassName do not apply, and the sandbox always starts cold (a warm pod cannot know its future directory). The directory should exist and be writable by uid or gid 1000; one the kubelet creates is root's.",
  );

export const Storage = z
  .strictObject({
    // No schema default, as for language: a Sandbox setting only the class keeps the pool's size.
    size: quantity("Size of the volume mounted at /mnt/user-data")
      .optional()
      .describe(
        "Size of the volume mounted at /mnt/user-data, as a Kubernetes quantity (for example 512Mi, 10Gi); 1Gi when neither the sandbox nor its pool sets one.",
      ),
    storageClassName: z
      .string()
      .max(253)
      .optional()
      .describe("StorageClass of the volume; the cluster's default class when omitted."),
    sharedClaim: SharedClaim.optional(),
  })
  .describe(
    "The volume at /mnt/user-data: a PersistentVolumeClaim of the sandbox's own (<pod>-data), or a directory of a shared claim (sharedClaim). It outlives suspension.",
  );

const reservedList = RESERVED_MOUNT_PATHS.map((r) => `'${r}'`).join(", ");

export const Mount = z
  .strictObject({
    claimName: claimName("Claim to mount"),
    mountPath: z
      .string()
      .max(512)
      .regex(MOUNT_PATH_PATTERN, `mountPath is ${MOUNT_PATH_RULE}`)
      .refine((p) => !hasDotSegment(p), "mountPath has no '.' or '..' segments")
      .refine(
        (p) => !reservedMountPath(p),
        `mountPath may not cover, lie under or contain ${RESERVED_MOUNT_PATHS.join(", ")}`,
      )
      .describe(
        `Absolute path in the sandbox, for example /mnt/skills. It may not cover, lie under or contain ${RESERVED_MOUNT_PATHS.join(", ")} (sandboxd's own paths and the system's; the user-data volume is spec.storage).`,
      ),
    readOnly: z
      .boolean()
      .optional()
      .describe("true mounts the claim read-only; read-write when omitted."),
    subPath: subPath("Directory of the claim to mount instead of its root").optional(),
  })
  .meta({
    "x-kubernetes-validations": [
      cel(noDotSegments("mountPath", false), "mountPath has no '.' or '..' segments"),
      cel(
        `[${reservedList}].all(r, self.mountPath != r && !self.mountPath.startsWith(r + '/') && !r.startsWith(self.mountPath + '/'))`,
        `mountPath may not cover, lie under or contain ${RESERVED_MOUNT_PATHS.join(", ")}`,
      ),
      subPathRule,
    ],
  })
  .describe("An existing PersistentVolumeClaim mounted into the sandbox.");

export const AllowRule = z
  .strictObject({
    cidr: z
      .string()
      .regex(/^[0-9a-fA-F:.]+\/[0-9]{1,3}$/, "cidr is an address range such as 203.0.113.0/24")
      .describe("Destination address range, for example 203.0.113.0/24."),
    ports: z
      .array(Port.describe("A TCP port."))
      .max(64)
      .optional()
      .describe("TCP ports allowed to that range; all ports when omitted."),
  })
  .describe("One egress destination allowed under egress: Allowlist.");

export const Network = z
  .strictObject({
    egress: z
      .enum(["Deny", "Internet", "Allowlist"])
      .default("Internet")
      .describe(
        "Outbound traffic: Deny (none at all, DNS included), Internet (public addresses only: private ranges, cloud metadata, the nodes' and the API server's addresses stay blocked; DNS through the cluster's resolvers), or Allowlist (only `allow`, and DNS only with `dns: true`).",
      ),
    allow: z
      .array(AllowRule)
      .max(64)
      .optional()
      .describe("Destinations allowed when egress is Allowlist."),
    allowDomains: z
      .array(
        z
          .string()
          .max(253)
          .regex(DOMAIN_PATTERN, "a domain such as pypi.org, or *.github.com for its subdomains")
          .describe("A domain name (pypi.org), or *. and a domain for any name under it."),
      )
      .max(64)
      .optional()
      .describe(
        "Allowlist only: domains reached by HTTP and HTTPS (ports 80 and 443) through the platform's egress proxy, which resolves each name itself, pins the address it checked and refuses private and cluster addresses. The sandbox gets HTTP(S)_PROXY set (pip, npm, curl, Python and Node honour it) and may reach nothing else by name: it needs no DNS.",
      ),
    dns: z
      .boolean()
      .optional()
      .describe(
        "Allowlist only: also resolve names through the cluster's DNS (UDP and TCP 53 to its resolvers). The resolvers forward any name, so code in the sandbox can send data out in the names it looks up; leave it off unless the allowlisted destinations are reached by name.",
      ),
  })
  .meta({
    "x-kubernetes-validations": [
      cel(
        "self.egress == 'Allowlist' ? (has(self.allow) && size(self.allow) > 0) || (has(self.allowDomains) && size(self.allowDomains) > 0) : (!has(self.allow) || size(self.allow) == 0) && (!has(self.allowDomains) || size(self.allowDomains) == 0)",
        "network.allow or network.allowDomains lists destinations exactly when network.egress is Allowlist",
      ),
      cel(
        "!has(self.dns) || self.egress == 'Allowlist'",
        "network.dns applies to egress Allowlist only",
      ),
    ],
  })
  .describe("Network policy of the sandbox. Ingress is always limited to the provisioner.");

export const Lifecycle = z
  .strictObject({
    ttlSeconds: z
      .number()
      .int()
      .min(60)
      .max(30 * 24 * 3600)
      .optional()
      .describe(
        "Lifetime from creation; the sandbox is deleted after it. The pool's, then the operator's default lifetime applies when omitted.",
      ),
    idleTimeoutSeconds: z
      .number()
      .int()
      .min(60)
      .max(30 * 24 * 3600)
      .optional()
      .describe(
        "The sandbox is suspended after this long without activity (data kept); activity reported after that resumes it.",
      ),
    suspended: z
      .boolean()
      .default(false)
      .describe("true stops the sandbox's Pod and keeps its data; false runs it."),
  })
  .meta({
    "x-kubernetes-validations": [
      cel(
        "!has(self.ttlSeconds) || !has(self.idleTimeoutSeconds) || self.idleTimeoutSeconds <= self.ttlSeconds",
        "lifecycle.idleTimeoutSeconds cannot be longer than lifecycle.ttlSeconds",
      ),
    ],
  })
  .describe("When the sandbox runs, sleeps and ends.");

/** The fields a Sandbox and a pool's template share. */
/**
 * A directory the sandbox gets empty (a client that expects a path to exist, such as DeerFlow's
 * `/mnt/skills/custom`): absolute, under /mnt, never the user-data volume or below it.
 */
export const EMPTY_DIR_PATTERN = /^\/mnt(\/[A-Za-z0-9_][A-Za-z0-9._-]{0,62}){1,8}$/;
export const EMPTY_DIR_RULE =
  "an absolute path under /mnt/ but not /mnt/user-data, of 1-8 segments of [A-Za-z0-9._-], none starting with '.' or '-'";
const notUserData = (p: string) => p !== "/mnt/user-data" && !p.startsWith("/mnt/user-data/");

const templateFields = {
  image: z
    .string()
    .min(1)
    .max(512)
    .optional()
    .describe("Sandbox image; the operator's default image when omitted."),
  // No schema default: the API server would fill it in on every Sandbox and hide the pool's.
  language: z
    .enum(["python", "typescript"])
    .optional()
    .describe(
      "Language packages are installed for; python when neither the sandbox nor its pool sets one.",
    ),
  packages: z
    .array(Package)
    .max(200)
    .optional()
    .describe("Packages installed before the sandbox is Ready."),
  env: z
    .array(EnvVar)
    .max(1000)
    .optional()
    .describe("Environment of every process in the sandbox."),
  resources: Resources.optional(),
  storage: Storage.optional(),
  mounts: z
    .array(Mount)
    .max(16)
    .refine(
      (ms) => new Set(ms.map((m) => m.mountPath)).size === ms.length,
      "each mount has its own mountPath",
    )
    .optional()
    .meta({ "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["mountPath"] })
    .describe(
      "Existing claims mounted into the sandbox (skills, a shared workspace). A sandbox's mounts add to its pool's; one at the same mountPath replaces the pool's. Each claim must exist: until it does, the sandbox is Pending with reason ClaimNotFound.",
    ),
  network: Network.optional(),
  lifecycle: Lifecycle.optional(),
  runtimeClassName: z
    .string()
    .max(253)
    .optional()
    .describe("RuntimeClass of the Pod, for stronger isolation (gVisor, Kata)."),
  emptyDirs: z
    .array(
      z
        .string()
        .max(512)
        .regex(EMPTY_DIR_PATTERN, EMPTY_DIR_RULE)
        .refine(notUserData, EMPTY_DIR_RULE),
    )
    .max(16)
    .refine((ps) => new Set(ps).size === ps.length, "emptyDirs: each path at most once")
    .optional()
    .meta({
      "x-kubernetes-list-type": "set",
      "x-kubernetes-validations": [
        cel(
          "self.all(p, p != '/mnt/user-data' && !p.startsWith('/mnt/user-data/'))",
          "emptyDirs cannot be /mnt/user-data or below it",
        ),
      ],
    })
    .describe(
      `Empty, writable directories made in the sandbox (the root filesystem is read-only): ${EMPTY_DIR_RULE}.`,
    ),
};

export const SandboxSpec = z
  .strictObject({
    poolRef: z
      .string()
      .max(253)
      .optional()
      .describe(
        "SandboxPool (same namespace) this sandbox belongs to: its template, cap and warm sandboxes apply.",
      ),
    ...templateFields,
    threadId: z
      .string()
      .regex(ID_PATTERN)
      .optional()
      .describe(`Conversation this sandbox serves (${ID_RULE}).`),
    userId: z
      .string()
      .regex(ID_PATTERN)
      .optional()
      .describe(`User owning the thread (${ID_RULE}).`),
  })
  .meta({
    "x-kubernetes-validations": [
      cel(
        "!has(oldSelf.poolRef) || has(self.poolRef) && self.poolRef == oldSelf.poolRef",
        "spec.poolRef cannot be changed",
      ),
      cel(
        "!has(oldSelf.threadId) || has(self.threadId) && self.threadId == oldSelf.threadId",
        "spec.threadId cannot be changed",
      ),
    ],
  })
  .describe("What the sandbox should be.");

export const Condition = z
  .strictObject({
    type: z
      .string()
      .max(316)
      .describe(
        "Condition type: Ready, PodScheduled, Suspended, Evicted, Expired, CapacityExceeded, ...",
      ),
    status: z.enum(["True", "False", "Unknown"]).describe("Whether the condition holds."),
    observedGeneration: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe("The .metadata.generation this condition was set for."),
    lastTransitionTime: z.iso.datetime().describe("When the status last changed."),
    reason: z.string().max(1024).describe("Machine-readable CamelCase reason."),
    message: z.string().max(32768).describe("Human-readable detail."),
  })
  .describe("A metav1.Condition.");

/** One condition per type, merged by type under server-side apply. */
const Conditions = z
  .array(Condition)
  .max(32)
  .optional()
  .meta({ "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"] })
  .describe("Current conditions, one per type.");

const observedGeneration = z
  .number()
  .int()
  .min(0)
  .optional()
  .describe("The .metadata.generation last acted on.");

const timestamp = (what: string) => z.iso.datetime().optional().describe(what);

export const SandboxStatus = z
  .strictObject({
    phase: z
      .enum(["Pending", "Starting", "Ready", "Suspended", "Failed", "Terminating"])
      .optional()
      .describe(
        "Summary of the conditions: Pending, Starting, Ready, Suspended, Failed or Terminating.",
      ),
    conditions: Conditions,
    observedGeneration,
    podName: z.string().optional().describe("The sandbox's Pod."),
    serviceName: z
      .string()
      .optional()
      .describe(
        "No longer set: sandboxes have no Service of their own (sandboxd is reached at endpoint). Kept on sandboxes made before.",
      ),
    endpoint: z.string().optional().describe("In-cluster address of sandboxd (host:port)."),
    tokenSecretRef: z.string().optional().describe("Secret holding the sandbox's bearer token."),
    startedAt: timestamp("When the current Pod started."),
    readyAt: timestamp("When the sandbox last became Ready."),
    lastActivityTime: timestamp(
      "Last activity reported by the provisioner (written at most every 15 s).",
    ),
    expiresAt: timestamp("When the TTL ends the sandbox."),
    recreations: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe(
        "Pods recreated after failing or vanishing since the sandbox was last Ready; at the operator's limit the sandbox is Failed.",
      ),
    lastFailure: z
      .strictObject({
        reason: z
          .string()
          .max(128)
          .describe(
            "Why: the kubelet's (Evicted, OOMKilled, Error, ...), or the disruption's (TerminationByKubelet, ...).",
          ),
        message: z.string().max(1024).describe("The kubelet's or the container's own words."),
        at: z.string().describe("When the operator saw it (RFC 3339)."),
        podUID: z.string().max(64).describe("The UID of the pod it happened to."),
        restarts: z
          .number()
          .int()
          .min(0)
          .describe("The container's restart count when it was recorded (a restart in place)."),
      })
      .optional()
      .describe(
        "The last time the sandbox's pod died or its sandboxd was restarted, and why; kept after the sandbox is Ready again.",
      ),
    initializedFor: z
      .string()
      .max(128)
      .optional()
      .describe(
        "The Pod UID and container restart count sandboxd was last initialised for (token, environment, packages).",
      ),
  })
  .describe("What the sandbox is, as observed by the operator.");

export const SandboxPoolSpec = z
  .strictObject({
    template: z
      .strictObject(templateFields)
      .describe("Spec fields every sandbox of the pool starts from."),
    maxActive: z
      .number()
      .int()
      .min(1)
      .max(10000)
      .describe("The most Ready sandboxes the pool runs at once."),
    warm: z
      .number()
      .int()
      .min(0)
      .max(1000)
      .default(0)
      .describe("Idle pre-started sandboxes kept ready to be claimed."),
    evictionPolicy: z
      .enum(["LRU", "Reject"])
      .default("LRU")
      .describe(
        "At maxActive: LRU suspends the least recently active sandbox; Reject keeps new ones waiting.",
      ),
    defaultIdleTimeoutSeconds: z
      .number()
      .int()
      .min(60)
      .optional()
      .describe("Idle timeout for sandboxes that set none."),
    defaultTtlSeconds: z
      .number()
      .int()
      .min(60)
      .optional()
      .describe("Lifetime for sandboxes that set none."),
    resourceBounds: ResourceBounds.optional(),
  })
  .meta({
    "x-kubernetes-validations": [
      cel("self.warm <= self.maxActive", "warm cannot exceed maxActive"),
    ],
  })
  .describe("A pool of sandboxes sharing a template, a cap and warm capacity.");

export const SandboxPoolStatus = z
  .strictObject({
    active: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe("Ready sandboxes counted against maxActive."),
    warmReady: z.number().int().min(0).optional().describe("Warm sandboxes ready to be claimed."),
    evictions: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe("Sandboxes suspended by LRU eviction so far."),
    conditions: Conditions,
    observedGeneration,
  })
  .describe("What the pool is, as observed by the operator.");

export type Package = z.infer<typeof Package>;
export type Mount = z.infer<typeof Mount>;
export type SharedClaim = z.infer<typeof SharedClaim>;
export type SandboxSpec = z.infer<typeof SandboxSpec>;
export type SandboxStatus = z.infer<typeof SandboxStatus>;
export type ResourceBounds = z.infer<typeof ResourceBounds>;
export type SandboxPoolSpec = z.infer<typeof SandboxPoolSpec>;
export type SandboxPoolStatus = z.infer<typeof SandboxPoolStatus>;

export interface Sandbox extends KObject {
  spec: SandboxSpec;
  status?: SandboxStatus;
}
export interface SandboxPool extends KObject {
  spec: SandboxPoolSpec;
  status?: SandboxPoolStatus;
}

/** Where the two kinds live in the API. */
export const SANDBOXES: Resource = {
  group: GROUP,
  version: VERSION,
  plural: "sandboxes",
  kind: "Sandbox",
};
export const POOLS: Resource = {
  group: GROUP,
  version: VERSION,
  plural: "sandboxpools",
  kind: "SandboxPool",
};
