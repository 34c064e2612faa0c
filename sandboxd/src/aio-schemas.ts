/**
 * The request bodies of the AIO (DeerFlow) routes (./aio.ts, ./aio-shell.ts), each built on its
 * first use: this module and zod are loaded by the first AIO request with a body, not at start
 * (see ./request-schemas.ts for why).
 */
import * as z from "zod";
import { ENV_NAME_PATTERN, ENV_NAME_RULE, MAX_SOURCE_BYTES } from "./wire.ts";
import { MAX_SECONDS } from "./aio-envelope.ts";

/** `build`'s value, made on the first call and the same object on every call after. */
function once<T>(build: () => T): () => T {
  let value: T | undefined;
  return () => (value ??= build());
}

// --- Files (./aio.ts) ---------------------------------------------------------------------------

export const fileRead = once(() =>
  z.object({
    file: z.string(),
    start_line: z.number().int().min(0).nullish(),
    end_line: z.number().int().min(0).nullish(),
    sudo: z.boolean().nullish(),
  }),
);
export const fileWrite = once(() =>
  z.object({
    file: z.string(),
    encoding: z.enum(["utf-8", "base64", "raw"]).nullish(),
    append: z.boolean().nullish(),
    leading_newline: z.boolean().nullish(),
    trailing_newline: z.boolean().nullish(),
    sudo: z.boolean().nullish(),
  }),
);
export const fileList = once(() =>
  z.object({
    path: z.string(),
    recursive: z.boolean().nullish(),
    show_hidden: z.boolean().nullish(),
    max_depth: z.number().int().min(1).max(32).nullish(),
  }),
);
export const fileFind = once(() =>
  z.object({ path: z.string(), glob: z.string().min(1).max(1000) }),
);
const globs = () =>
  z
    .union([z.string().min(1).max(1000), z.array(z.string().min(1).max(1000)).max(100)])
    .nullish()
    .transform((g) => (g == null ? [] : Array.isArray(g) ? g : [g]));
export const fileGrep = once(() => {
  const g = globs();
  return z.object({
    path: z.string(),
    pattern: z.string().min(1).max(10_000),
    include: g,
    exclude: g,
    case_insensitive: z.boolean().nullish(),
    fixed_strings: z.boolean().nullish(),
    context_before: z.number().int().min(0).max(100).nullish(),
    context_after: z.number().int().min(0).max(100).nullish(),
    max_results: z.number().int().positive().max(10_000).nullish(),
    max_file_size: z.union([z.string(), z.number().int().positive()]).nullish(),
    multiline: z.boolean().nullish(),
    offset: z.number().int().min(0).nullish(),
    type: z.string().max(20).nullish(),
    recursive: z.boolean().nullish(),
  });
});

// --- Shell and bash sessions (./aio-shell.ts) ---------------------------------------------------

const seconds = once(() => z.number().positive().max(MAX_SECONDS));
const sessionId = once(() => z.string().min(1).max(200));

export const shellExec = once(() =>
  z.object({
    command: z.string().min(1).max(MAX_SOURCE_BYTES),
    id: sessionId().nullish(),
    exec_dir: z.string().nullish(),
    async_mode: z.boolean().nullish(),
    timeout: seconds().nullish(),
    hard_timeout: seconds().nullish(),
    no_change_timeout: seconds().nullish(),
    strict: z.boolean().nullish(),
    preserve_symlinks: z.boolean().nullish(),
    /** AIO's client sends a boolean (cut output past 30,000 characters); a number sets the limit. */
    truncate: z.union([z.boolean(), z.number().int().positive()]).nullish(),
  }),
);
export const shellId = once(() => z.object({ id: sessionId() }));
export const shellWait = once(() =>
  z.object({
    id: sessionId(),
    seconds: seconds().nullish(),
    max_wait_seconds: seconds().nullish(),
  }),
);
export const shellCreate = once(() =>
  z.object({
    id: sessionId().nullish(),
    exec_dir: z.string().nullish(),
    no_change_timeout: seconds().nullish(),
    preserve_symlinks: z.boolean().nullish(),
  }),
);
export const shellUpdate = once(() =>
  z.object({ id: sessionId(), no_change_timeout: seconds().nullish() }),
);
export const bashExec = once(() =>
  z.object({
    command: z.string().min(1).max(MAX_SOURCE_BYTES),
    session_id: sessionId().nullish(),
    exec_dir: z.string().nullish(),
    env: z
      .record(z.string().regex(ENV_NAME_PATTERN, ENV_NAME_RULE), z.string().nullable())
      .nullish(),
    async_mode: z.boolean().nullish(),
    timeout: seconds().nullish(),
    hard_timeout: seconds().nullish(),
    max_output_length: z.number().int().min(0).nullish(),
  }),
);
export const bashOutput = once(() =>
  z.object({
    session_id: sessionId(),
    command_id: z.string().max(200).nullish(),
    offset: z.number().int().min(0).nullish(),
    stderr_offset: z.number().int().min(0).nullish(),
    wait: z.boolean().nullish(),
    wait_timeout: seconds().nullish(),
  }),
);
export const bashKill = once(() =>
  z.object({
    session_id: sessionId(),
    signal: z.enum(["SIGTERM", "SIGKILL", "SIGINT"]).nullish(),
  }),
);
export const bashCreate = once(() =>
  z.object({
    session_id: sessionId().nullish(),
    exec_dir: z.string().nullish(),
    snapshot_path: z.string().nullish(),
  }),
);
