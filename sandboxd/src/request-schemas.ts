/**
 * The request schemas of sandboxd's native API, each built on its first use. ./protocol.ts
 * exports them all, built (what the SDK, the provisioner and the operator import); sandboxd itself
 * loads this module with the first request that has a body to check, and builds only the schemas
 * of the routes called (./request-input.ts): zod and forty schemas built at start were a fifth of
 * a fresh sandboxd's start-up CPU and 7 MiB of its idle memory (bench/RESULTS.md, "A lean
 * sandboxd"), for routes most sandboxes never call.
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
  PACKAGE_SPEC_PATTERN,
  PROCESS_SIGNALS,
  PTY_MAX_SIZE,
  ptyDimensionRule,
} from "./wire.ts";

/** `build`'s value, made on the first call and the same object on every call after. */
function once<T>(build: () => T): () => T {
  let value: T | undefined;
  return () => (value ??= build());
}

/** A TCP port inside a sandbox, as getHost, sandboxd's tunnel and the provisioner's ports route take one. */
export const port = once(() => z.number().int().min(1).max(65535));

const envMap = once(() =>
  z
    .record(
      z.string().regex(ENV_NAME_PATTERN, ENV_NAME_RULE),
      z.string().refine((v) => !v.includes("\0"), "environment values may not contain NUL"),
    )
    .refine((m) => Object.keys(m).length <= 1000, "at most 1000 environment variables"),
);

const timeoutMs = once(() => z.number().int().positive().max(MAX_TIMEOUT_MS));

const command = once(() => z.string().min(1, "command is empty").max(MAX_SOURCE_BYTES));

export const language = once(() =>
  z.enum(LANGUAGES, {
    error: (issue) =>
      `unknown language ${JSON.stringify(issue.input)}: use "python" or "typescript"`,
  }),
);

export const runCommand = once(() =>
  z.strictObject({
    command: command(),
    cwd: z.string().optional(),
    env: envMap().optional(),
    timeoutMs: timeoutMs().optional(),
    stdin: z.string().optional(),
  }),
);

export const executeCode = once(() =>
  z.strictObject({
    language: language(),
    code: z.string().max(MAX_SOURCE_BYTES),
    cwd: z.string().optional(),
    env: envMap().optional(),
    timeoutMs: timeoutMs().optional(),
  }),
);

/**
 * A package as pip or npm takes it, a name with an optional version (`numpy==2.1.0`, `zod@4`):
 * the one form packages have from the SDK's create options to the installer. It is passed to
 * pip/npm as one argv entry, never through a shell; still, option-like or whitespace-laden specs
 * are refused so no flag can be smuggled in. Long enough for the longest spec a Sandbox resource
 * can name (a 200-character name, an operator, a 100-character version).
 */
export const packageSpec = once(() =>
  z
    .string()
    .min(1)
    .max(320)
    .regex(PACKAGE_SPEC_PATTERN, "a package is a name with an optional version, not an option"),
);
export const packageSpecs = once(() => z.array(packageSpec()).max(200));

export const installPackages = once(() =>
  z.strictObject({
    language: language(),
    packages: packageSpecs(),
    timeoutMs: timeoutMs().optional(),
  }),
);

export const mkdir = once(() => z.strictObject({ path: z.string() }));

export const init = once(() =>
  z.strictObject({
    token: z.string().min(32).max(512),
    env: envMap().optional(),
    packages: packageSpecs().optional(),
    language: language().optional(),
  }),
);

/** `POST /v1/drain` (./wire.ts DRAIN_PATH). */
export const drain = once(() =>
  z.strictObject({
    idleMs: z
      .number()
      .int()
      .min(0)
      .max(MAX_TIMEOUT_MS * 365),
  }),
);

// --- Terminals (PTY): see docs/terminals.md -----------------------------------------------------

const ptyDimension = (name: string) =>
  z
    .number({ error: ptyDimensionRule(name) })
    .int(ptyDimensionRule(name))
    .min(1, ptyDimensionRule(name))
    .max(PTY_MAX_SIZE, ptyDimensionRule(name));

export const ptySize = once(() =>
  z.strictObject({ cols: ptyDimension("cols"), rows: ptyDimension("rows") }),
);

/** `POST /v1/pty`: without `command`, the sandbox user's login shell (`bash -l`). */
export const ptyCreate = once(() =>
  ptySize().extend({
    command: z.string().min(1, "command is empty").max(MAX_SOURCE_BYTES).optional(),
    cwd: z.string().optional(),
    env: envMap().optional(),
  }),
);

/**
 * Text frames on a terminal's WebSocket (`GET /v1/pty/<pid>/connect`); binary frames are the
 * terminal's bytes both ways. The client may send `resize`; the server sends `exit` once, then
 * closes with 1000.
 */
export const ptyClientMessage = once(() =>
  z.discriminatedUnion("type", [ptySize().extend({ type: z.literal("resize") })]),
);

// --- Code contexts: persistent interpreters whose cells share state and return rich results ---

export const createContext = once(() =>
  z.strictObject({
    language: language(),
    cwd: z.string().optional(),
  }),
);

export const executeCell = once(() =>
  z.strictObject({
    code: z.string().max(MAX_SOURCE_BYTES),
    /** When given, the context must run this language (else INVALID_ARGUMENT, and nothing runs). */
    language: language().optional(),
    /** Variables set for this cell only (restored after it). */
    env: envMap().optional(),
    timeoutMs: timeoutMs().optional(),
  }),
);

// --- Files, complete (issue 14): move, append, glob, grep, watch (routes in files.ts) ---

export const rename = once(() => z.strictObject({ from: z.string(), to: z.string() }));

export const glob = once(() =>
  z.strictObject({
    /** Relative to `cwd`, or absolute under the root; `**` crosses directories. */
    pattern: z.string().min(1).max(1000),
    cwd: z.string().optional(),
    limit: z.number().int().positive().max(MAX_GLOB_RESULTS).optional(),
  }),
);

export const grep = once(() =>
  z.strictObject({
    pattern: z.string().min(1).max(10_000),
    /** A directory (searched recursively) or a file; default the workspace. */
    path: z.string().optional(),
    /** Only files whose name (or relative path) matches this glob. */
    glob: z.string().min(1).max(1000).optional(),
    ignoreCase: z.boolean().optional(),
    literal: z.boolean().optional(),
    maxMatches: z.number().int().positive().max(MAX_GREP_MATCHES).optional(),
  }),
);

// --- Background processes (issue 14: processes with handles) ---

export const startProcess = once(() =>
  z.strictObject({
    command: command(),
    cwd: z.string().optional(),
    env: envMap().optional(),
    /** Kills the group this long after the start; without it the process runs until it ends. */
    timeoutMs: timeoutMs().optional(),
    /** Written to stdin first; stdin then stays open until closed. */
    stdin: z.string().max(MAX_STDIN_BYTES).optional(),
    /** A label `GET /v1/processes` shows. */
    tag: z.string().max(256).optional(),
  }),
);

export const signalProcess = once(() =>
  z.strictObject({
    signal: z.enum(PROCESS_SIGNALS, {
      error: (issue) =>
        `unknown signal ${JSON.stringify(issue.input)}: use one of ${PROCESS_SIGNALS.join(", ")}`,
    }),
  }),
);
