/**
 * The sandboxd wire protocol: request schemas (validated on the server) here, and everything
 * else (response shapes, the error envelope, limits; ./wire.ts) re-exported. Both ends import
 * these two files, so the server and every provider's data-plane client cannot drift apart.
 */
import * as z from "zod";
import {
  ENV_NAME_PATTERN,
  ENV_NAME_RULE,
  LANGUAGES,
  MAX_GLOB_RESULTS,
  MAX_GREP_MATCHES,
  MAX_SOURCE_BYTES,
  MAX_STDIN_BYTES,
  MAX_TIMEOUT_MS,
  PROCESS_SIGNALS,
  PTY_MAX_SIZE,
  ptyDimensionRule,
} from "./wire.ts";

export * from "./wire.ts";

/** A TCP port inside a sandbox, as getHost, sandboxd's tunnel and the provisioner's ports route take one. */
export const Port = z.number().int().min(1).max(65535);

const envMap = z
  .record(
    z.string().regex(ENV_NAME_PATTERN, ENV_NAME_RULE),
    z.string().refine((v) => !v.includes("\0"), "environment values may not contain NUL"),
  )
  .refine((m) => Object.keys(m).length <= 1000, "at most 1000 environment variables");

const timeoutMs = z.number().int().positive().max(MAX_TIMEOUT_MS);

export const RunCommandRequest = z.strictObject({
  command: z.string().min(1, "command is empty").max(MAX_SOURCE_BYTES),
  cwd: z.string().optional(),
  env: envMap.optional(),
  timeoutMs: timeoutMs.optional(),
  stdin: z.string().optional(),
});
export type RunCommandRequest = z.infer<typeof RunCommandRequest>;

export const ExecuteCodeRequest = z.strictObject({
  language: z.enum(LANGUAGES, {
    error: (issue) =>
      `unknown language ${JSON.stringify(issue.input)}: use "python" or "typescript"`,
  }),
  code: z.string().max(MAX_SOURCE_BYTES),
  cwd: z.string().optional(),
  env: envMap.optional(),
  timeoutMs: timeoutMs.optional(),
});
export type ExecuteCodeRequest = z.infer<typeof ExecuteCodeRequest>;

/**
 * A package as pip or npm takes it, a name with an optional version (`numpy==2.1.0`, `zod@4`):
 * the one form packages have from the SDK's create options to the installer. It is passed to
 * pip/npm as one argv entry, never through a shell; still, option-like or whitespace-laden specs
 * are refused so no flag can be smuggled in. Long enough for the longest spec a Sandbox resource
 * can name (a 200-character name, an operator, a 100-character version).
 */
export const PackageSpec = z
  .string()
  .min(1)
  .max(320)
  .regex(/^[^\s-][^\s]*$/, "a package is a name with an optional version, not an option");
export const PackageSpecs = z.array(PackageSpec).max(200);

export const InstallPackagesRequest = z.strictObject({
  language: ExecuteCodeRequest.shape.language,
  packages: PackageSpecs,
  timeoutMs: timeoutMs.optional(),
});
export type InstallPackagesRequest = z.infer<typeof InstallPackagesRequest>;

export const MkdirRequest = z.strictObject({ path: z.string() });

export const InitRequest = z.strictObject({
  token: z.string().min(32).max(512),
  env: envMap.optional(),
  packages: PackageSpecs.optional(),
  language: ExecuteCodeRequest.shape.language.optional(),
});
export type InitRequest = z.infer<typeof InitRequest>;

/** `POST /v1/drain` (./wire.ts DRAIN_PATH). */
export const DrainRequest = z.strictObject({
  idleMs: z
    .number()
    .int()
    .min(0)
    .max(MAX_TIMEOUT_MS * 365),
});
export type DrainRequest = z.infer<typeof DrainRequest>;

// --- Terminals (PTY): see docs/terminals.md -----------------------------------------------------

const ptyDimension = (name: string) =>
  z
    .number({ error: ptyDimensionRule(name) })
    .int(ptyDimensionRule(name))
    .min(1, ptyDimensionRule(name))
    .max(PTY_MAX_SIZE, ptyDimensionRule(name));

export const PtySize = z.strictObject({ cols: ptyDimension("cols"), rows: ptyDimension("rows") });
export type PtySize = z.infer<typeof PtySize>;

/** `POST /v1/pty`: without `command`, the sandbox user's login shell (`bash -l`). */
export const PtyCreateRequest = PtySize.extend({
  command: z.string().min(1, "command is empty").max(MAX_SOURCE_BYTES).optional(),
  cwd: z.string().optional(),
  env: envMap.optional(),
});
export type PtyCreateRequest = z.infer<typeof PtyCreateRequest>;

/**
 * Text frames on a terminal's WebSocket (`GET /v1/pty/<pid>/connect`); binary frames are the
 * terminal's bytes both ways. The client may send `resize`; the server sends `exit` once, then
 * closes with 1000.
 */
export const PtyClientMessage = z.discriminatedUnion("type", [
  PtySize.extend({ type: z.literal("resize") }),
]);
export type PtyClientMessage = z.infer<typeof PtyClientMessage>;
// --- Code contexts: persistent interpreters whose cells share state and return rich results ---

export const CreateContextRequest = z.strictObject({
  language: ExecuteCodeRequest.shape.language,
  cwd: z.string().optional(),
});
export type CreateContextRequest = z.infer<typeof CreateContextRequest>;

export const ExecuteCellRequest = z.strictObject({
  code: z.string().max(MAX_SOURCE_BYTES),
  /** When given, the context must run this language (else INVALID_ARGUMENT, and nothing runs). */
  language: ExecuteCodeRequest.shape.language.optional(),
  /** Variables set for this cell only (restored after it). */
  env: envMap.optional(),
  timeoutMs: timeoutMs.optional(),
});
export type ExecuteCellRequest = z.infer<typeof ExecuteCellRequest>;

// --- Files, complete (issue 14): move, append, glob, grep, watch (routes in files.ts) ---

export const RenameRequest = z.strictObject({ from: z.string(), to: z.string() });
export type RenameRequest = z.infer<typeof RenameRequest>;

export const GlobRequest = z.strictObject({
  /** Relative to `cwd`, or absolute under the root; `**` crosses directories. */
  pattern: z.string().min(1).max(1000),
  cwd: z.string().optional(),
  limit: z.number().int().positive().max(MAX_GLOB_RESULTS).optional(),
});
export type GlobRequest = z.infer<typeof GlobRequest>;
export const GrepRequest = z.strictObject({
  pattern: z.string().min(1).max(10_000),
  /** A directory (searched recursively) or a file; default the workspace. */
  path: z.string().optional(),
  /** Only files whose name (or relative path) matches this glob. */
  glob: z.string().min(1).max(1000).optional(),
  ignoreCase: z.boolean().optional(),
  literal: z.boolean().optional(),
  maxMatches: z.number().int().positive().max(MAX_GREP_MATCHES).optional(),
});
export type GrepRequest = z.infer<typeof GrepRequest>;
// --- Background processes (issue 14: processes with handles) ---

export const StartProcessRequest = z.strictObject({
  command: RunCommandRequest.shape.command,
  cwd: z.string().optional(),
  env: envMap.optional(),
  /** Kills the group this long after the start; without it the process runs until it ends. */
  timeoutMs: timeoutMs.optional(),
  /** Written to stdin first; stdin then stays open until closed. */
  stdin: z.string().max(MAX_STDIN_BYTES).optional(),
  /** A label `GET /v1/processes` shows. */
  tag: z.string().max(256).optional(),
});
export type StartProcessRequest = z.infer<typeof StartProcessRequest>;

export const SignalProcessRequest = z.strictObject({
  signal: z.enum(PROCESS_SIGNALS, {
    error: (issue) =>
      `unknown signal ${JSON.stringify(issue.input)}: use one of ${PROCESS_SIGNALS.join(", ")}`,
  }),
});
