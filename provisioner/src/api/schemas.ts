/**
 * The request and response shapes of the native API, as zod schemas: they validate requests,
 * and /openapi.json is generated from them, so the document cannot drift from the code.
 */
import {
  EMPTY_DIR_PATTERN,
  EMPTY_DIR_RULE,
  POSITIVE_QUANTITY_RULE,
  QUANTITY_PATTERN,
  QUANTITY_RULE,
  ZERO_QUANTITY_PATTERN,
} from "@sandpit/operator/api";
import {
  ENV_NAME_PATTERN,
  ENV_NAME_RULE,
  ID_PATTERN,
  ID_RULE,
  VIRTUAL_ROOT,
} from "@sandpit/sandboxd/protocol";
import { z } from "zod";

const quantity = z
  .string()
  .regex(QUANTITY_PATTERN, QUANTITY_RULE)
  .refine((q) => !ZERO_QUANTITY_PATTERN.test(q), POSITIVE_QUANTITY_RULE);
const labelKey = z
  .string()
  .regex(
    /^([a-z0-9.-]{1,253}\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/,
    "a Kubernetes label key",
  );
const labelValue = z
  .string()
  .regex(/^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/, "a Kubernetes label value");

export const CreateSandbox = z
  .strictObject({
    pool: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/)
      .optional()
      .describe("SandboxPool to take the sandbox from."),
    language: z.enum(["python", "typescript"]).default("python"),
    packages: z
      .array(z.string().min(1).max(200))
      .max(200)
      .optional()
      .describe("pip or npm specs, e.g. numpy==2.1.0 or zod@4."),
    env: z
      .record(z.string().regex(ENV_NAME_PATTERN, ENV_NAME_RULE), z.string().max(32768))
      .optional(),
    resources: z
      .strictObject({
        cpu: quantity.optional(),
        memory: quantity.optional(),
        ephemeralStorage: quantity.optional(),
      })
      .optional()
      .describe(
        "Limits within the pool's resourceBounds (the platform's where the pool sets none) and the API key's maxResources; outside them the create is refused with 400 naming the bound.",
      ),
    ttlSeconds: z
      .number()
      .int()
      .min(60)
      .max(30 * 24 * 3600)
      .optional(),
    idleTimeoutSeconds: z
      .number()
      .int()
      .min(60)
      .max(30 * 24 * 3600)
      .optional(),
    threadId: z
      .string()
      .regex(ID_PATTERN, ID_RULE)
      .optional()
      .describe("Same (user, thread), same sandbox: creates are idempotent."),
    userId: z.string().regex(ID_PATTERN, ID_RULE).optional(),
    labels: z
      .record(labelKey, labelValue)
      .optional()
      .describe("Your labels, for GET /v1/sandboxes?label=key=value."),
    network: z
      .literal("deny")
      .optional()
      .describe(
        "deny: no outbound traffic but DNS. Only ever a restriction: without it the pool's (or the platform's) policy applies.",
      ),
    wait: z
      .boolean()
      .default(true)
      .describe("Answer once the sandbox is Ready (default) or at once."),
  })
  .describe("A sandbox to create, or to find again for its (user, thread).");

export const SetTimeout = z
  .strictObject({
    timeoutSeconds: z
      .number()
      .int()
      .min(60)
      .max(30 * 24 * 3600)
      .describe("The sandbox is deleted this long from now (its lifetime is replaced)."),
  })
  .describe("A new end for the sandbox's lifetime.");

export const SandboxView = z.object({
  id: z.string(),
  url: z.string().describe("Base URL of the sandbox's sandboxd API through this service."),
  token: z
    .string()
    .optional()
    .describe("sandboxd's bearer token, for clients inside the cluster that go direct."),
  phase: z.string().describe("Pending, Starting, Ready, Suspended, Failed or Terminating."),
  endpoint: z.string().optional().describe("In-cluster address of sandboxd."),
  expiresAt: z.string().optional(),
  createdAt: z.string().optional(),
  pool: z.string().optional(),
  language: z.string().optional(),
  resources: z
    .object({
      cpu: z.string().optional(),
      memory: z.string().optional(),
      ephemeralStorage: z.string().optional(),
    })
    .optional()
    .describe("What the sandbox asked for; its pool's or the platform's otherwise."),
  threadId: z.string().optional(),
  userId: z.string().optional(),
  labels: z.record(z.string(), z.string()),
});

export const SandboxList = z.object({ sandboxes: z.array(SandboxView) });
export const ErrorBody = z.object({ error: z.object({ code: z.string(), message: z.string() }) });

export const ListQuery = z.strictObject({
  label: z
    .union([z.string(), z.array(z.string())])
    .optional()
    .describe("key=value; repeat for several (all must match)."),
});

export const MAX_EXTRA_MOUNTS = 10;

/** One of DeerFlow's `extra_mounts`: a host path we never use, and where the sandbox wants it. */
export const DeerFlowMount = z.object({
  host_path: z.string().max(4096),
  container_path: z
    .string()
    .max(512)
    .regex(EMPTY_DIR_PATTERN, EMPTY_DIR_RULE)
    .refine((p) => p !== VIRTUAL_ROOT && !p.startsWith(`${VIRTUAL_ROOT}/`), EMPTY_DIR_RULE),
  read_only: z.boolean().default(false),
});

/**
 * DeerFlow's provisioner API (docker/provisioner/app.py), field for field; unknown fields pass.
 * Its user and thread ids share our id rule; sandbox ids are only ever put in a hash and an
 * annotation, so they may be anything DeerFlow names a directory with.
 */
export const DeerFlowCreate = z.object({
  sandbox_id: z
    .string()
    .min(1)
    .max(255)
    .refine(
      (id) => [...id].every((c) => c !== "/" && c.charCodeAt(0) > 0x1f && c !== "\u007f"),
      "sandbox_id: 1-255 characters, no '/' or control characters",
    ),
  thread_id: z.string().regex(ID_PATTERN, `thread_id: ${ID_RULE}`).nullish(),
  user_id: z
    .string()
    .regex(ID_PATTERN, `user_id: ${ID_RULE}`)
    .nullish()
    .transform((u) => u ?? "default"),
  extra_mounts: z
    .array(DeerFlowMount)
    .max(MAX_EXTRA_MOUNTS, `extra_mounts: at most ${MAX_EXTRA_MOUNTS}`)
    .refine(
      (ms) => new Set(ms.map((m) => m.container_path)).size === ms.length,
      "extra_mounts: each container_path at most once",
    )
    .nullish(),
  include_legacy_skills: z.boolean().nullish(),
  provision_lark_cli_runtime: z.boolean().nullish(),
  provision_lark_cli_broker: z.boolean().nullish(),
});
export const DeerFlowSandbox = z.object({
  sandbox_id: z.string(),
  sandbox_url: z.string(),
  status: z
    .string()
    .describe("Running while the sandbox_url serves (a suspended sandbox included)."),
  extra_mounts: z
    .array(
      z.object({
        container_path: z.string(),
        provided_as: z
          .enum(["volume", "empty_dir"])
          .describe(
            "volume: the claim the provisioner's settings map this path to; empty_dir: an empty, writable directory.",
          ),
        claim_name: z.string().optional().describe("The claim mounted, for a volume."),
      }),
    )
    .describe("What each asked-for container path became in the sandbox."),
});
