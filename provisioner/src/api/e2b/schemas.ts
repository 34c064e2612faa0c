/**
 * The E2B control plane's request shapes (E2B's OpenAPI: NewSandbox, ConnectSandbox,
 * SandboxTimeoutRequest, ...), checked with zod: a wrong type is a 400 naming the field, never a
 * 5xx. Fields E2B defines that Sandpit does not serve are accepted only in their do-nothing form
 * and otherwise refused by name (see docs/e2b.md, "Differences from E2B cloud").
 */
import { ENV_NAME_PATTERN, ENV_NAME_RULE } from "@sandpit/sandboxd/protocol";
import { z } from "zod";

/** E2B's timeouts are int32 seconds. */
const seconds = z.number().int().min(0).max(2_147_483_647);
const MAX_METADATA_ENTRIES = 64;
const MAX_METADATA_BYTES = 16 * 1024;

const Metadata = z
  .record(z.string().min(1).max(256), z.string().max(4096))
  .refine(
    (m) => Object.keys(m).length <= MAX_METADATA_ENTRIES,
    `at most ${MAX_METADATA_ENTRIES} entries`,
  )
  .refine(
    (m) => Buffer.byteLength(JSON.stringify(m)) <= MAX_METADATA_BYTES,
    `at most ${MAX_METADATA_BYTES} bytes in all`,
  );

/** What a feature Sandpit lacks must look like to be accepted: absent, or asking for nothing. */
const absentOr = <T extends z.ZodType>(schema: T, what: string) =>
  schema.nullish().refine((v) => v === undefined || v === null || isEmpty(v), {
    message: `${what} is not supported by Sandpit`,
  });

function isEmpty(v: unknown): boolean {
  if (Array.isArray(v)) return v.length === 0;
  if (typeof v === "object" && v !== null) return Object.values(v).every((x) => x === undefined);
  return false;
}

/** POST /sandboxes and POST /v2/sandboxes. Unknown fields are ignored, as E2B's API does. */
export const NewSandbox = z.object({
  templateID: z.string().min(1).max(253),
  timeout: seconds.nullish(),
  metadata: Metadata.nullish(),
  envVars: z
    .record(z.string().regex(ENV_NAME_PATTERN, ENV_NAME_RULE), z.string().max(32_768))
    .nullish(),
  autoPause: z.boolean().nullish(),
  autoPauseMemory: z.boolean().nullish(),
  autoResume: z.object({ enabled: z.boolean() }).nullish(),
  secure: z.boolean().nullish(),
  allow_internet_access: z.boolean().nullish(),
  // Public user ports are the one network setting Sandpit has (allowPublicTraffic: true).
  network: z
    .object({ allowPublicTraffic: z.literal(true).optional() })
    .catchall(z.unknown())
    .nullish()
    .refine(
      (n) =>
        !n || Object.entries(n).every(([k, v]) => v === undefined || k === "allowPublicTraffic"),
      // "not supported" is how clients tell a refused feature from bad input (docs/e2b.md).
      "network: only allowPublicTraffic: true is supported; allow and deny lists are not supported by Sandpit (egress: allow_internet_access)",
    ),
  mcp: absentOr(z.record(z.string(), z.unknown()), "mcp (the MCP gateway)"),
  volumeMounts: absentOr(z.array(z.unknown()), "volumeMounts (E2B volumes)"),
  iam: absentOr(z.record(z.string(), z.unknown()), "iam (workload identity tokens)"),
});
export type NewSandbox = z.infer<typeof NewSandbox>;

/** POST /sandboxes/:id/connect (timeout required in v1) and /v2/... (optional, 300 s). */
export const ConnectSandbox = z.object({
  timeout: seconds.optional(),
  memory: z.boolean().optional(),
});

/** POST /sandboxes/:id/resume (deprecated). */
export const ResumeSandbox = z.object({
  timeout: seconds.optional(),
  autoPause: z.boolean().optional(),
  memory: z.boolean().optional(),
});

export const SetTimeout = z.object({ timeout: seconds });
export const Refresh = z.object({ duration: seconds.max(3600).optional() });
export const Pause = z.object({ memory: z.boolean().optional() });

export const STATES = ["running", "paused"] as const;
export type SandboxState = (typeof STATES)[number];

/** E2B's page size limits (paginationLimit): 1-100, 100 when not given. */
export const MAX_PAGE = 100;

/** GET /v2/sandboxes (and the metadata filter of GET /sandboxes). */
export const ListQuery = z.object({
  metadata: z
    .string()
    .max(MAX_METADATA_BYTES * 3)
    .optional(),
  state: z
    .union([z.string(), z.array(z.string())])
    .optional()
    .transform((s) => (s === undefined ? undefined : [s].flat().flatMap((x) => x.split(","))))
    .refine(
      (s) => !s || s.every((x) => (STATES as readonly string[]).includes(x)),
      `state: each of ${STATES.join(", ")}`,
    )
    .transform((s) => s as SandboxState[] | undefined),
  limit: z
    .string()
    .regex(/^\d{1,6}$/, "limit: a whole number")
    .transform(Number)
    .refine((n) => n >= 1 && n <= MAX_PAGE, `limit: 1 to ${MAX_PAGE}`)
    .optional(),
  nextToken: z.string().max(512).optional(),
  order: z.enum(["asc", "desc"]).optional(),
  startedAfter: z.iso.datetime({ offset: true }).optional(),
  template: z.string().max(253).optional(),
});
export type ListQuery = z.infer<typeof ListQuery>;
