/**
 * sandboxd reads its settings from the environment (the natural interface for a container
 * entrypoint and for a parent process alike), validated strictly so a typo fails at start-up.
 */
import * as z from "zod";
import {
  DEFAULT_MAX_PROCESSES,
  DEFAULT_OUTPUT_CAP_BYTES,
  DEFAULT_PROCESS_OUTPUT_BYTES,
  DEFAULT_PROCESS_OUTPUT_TOTAL_BYTES,
  VIRTUAL_ROOT,
} from "./protocol.ts";

const Settings = z.object({
  /** host:port (port 0 picks a free one, reported on stdout) or unix:/path/to/socket. */
  SANDBOXD_LISTEN: z
    .string()
    .regex(/^([^:]+:\d+|unix:\/.+)$/, "expected host:port or unix:/absolute/path")
    .default("0.0.0.0:8080"),
  /** Directory mapped to /mnt/user-data (in an image they are the same). */
  SANDBOXD_ROOT: z.string().startsWith("/", "must be an absolute path").default(VIRTUAL_ROOT),
  SANDBOXD_TOKEN: z.string().min(32, "the token must be at least 32 characters").optional(),
  SANDBOXD_TOKEN_FILE: z.string().optional(),
  /**
   * The token's SHA-256 (hex) instead of the token: what a pod is given, so the token itself is
   * in no environment the sandbox's code can read (/proc/1/environ).
   */
  SANDBOXD_TOKEN_SHA256: z
    .string()
    .regex(/^[0-9a-f]{64}$/, "the token's SHA-256 as 64 lowercase hex digits")
    .optional(),
  /**
   * "1": read the token from the first line of stdin and exit when stdin closes (parent gone).
   * "detached": read it the same way but outlive the parent (the local provider's sandboxes
   * keep running between the processes that use them; a signal stops them).
   */
  SANDBOXD_TOKEN_STDIN: z.enum(["0", "1", "detached"]).default("0"),
  SANDBOXD_OUTPUT_CAP_BYTES: z.coerce.number().int().positive().default(DEFAULT_OUTPUT_CAP_BYTES),
  /** JSON object of variables every process in this sandbox gets. */
  SANDBOXD_ENV: z
    .string()
    .default("{}")
    .transform((s, ctx) => {
      try {
        return z.record(z.string(), z.string()).parse(JSON.parse(s));
      } catch {
        ctx.addIssue({ code: "custom", message: "must be a JSON object of strings" });
        return z.NEVER;
      }
    }),
  /**
   * Where AIO file routes (/v1/file/*) and shell working directories may point: `jail` keeps them
   * under the sandbox root, as the native API does (the local provider, where the host is outside
   * the sandbox); `any` allows any path the sandbox user can reach (a container or pod, where bash
   * can reach them anyway).
   */
  SANDBOXD_AIO_PATHS: z.enum(["jail", "any"]).default("jail"),
  /**
   * "1": answer the AIO routes and /v1/sandbox without a token (DeerFlow's local container
   * backend sends none). Native routes still need the token, and are closed when none is set.
   */
  SANDBOXD_AIO_NO_AUTH: z.enum(["0", "1"]).default("0"),
  /** Persistent shell sessions kept at once, and how long an idle one lives. */
  SANDBOXD_AIO_MAX_SESSIONS: z.coerce.number().int().min(1).max(1024).default(32),
  SANDBOXD_AIO_SESSION_IDLE_SECONDS: z.coerce
    .number()
    .positive()
    .default(30 * 60),
  /** Terminals (PTYs) running at once, and how long one without clients or input lives. */
  SANDBOXD_MAX_TERMINALS: z.coerce.number().int().min(1).max(1024).default(32),
  SANDBOXD_TERMINAL_IDLE_SECONDS: z.coerce
    .number()
    .positive()
    .default(30 * 60),
  /** Code contexts (persistent interpreters) kept at once, and how long an idle one lives. */
  SANDBOXD_MAX_CONTEXTS: z.coerce.number().int().min(1).max(256).default(16),
  SANDBOXD_CONTEXT_IDLE_SECONDS: z.coerce
    .number()
    .positive()
    .default(30 * 60),
  /** Background processes: how many run at once, and the output kept for late readers. */
  SANDBOXD_MAX_PROCESSES: z.coerce.number().int().min(1).max(10_000).default(DEFAULT_MAX_PROCESSES),
  SANDBOXD_PROCESS_OUTPUT_BYTES: z.coerce
    .number()
    .int()
    .min(4096)
    .default(DEFAULT_PROCESS_OUTPUT_BYTES),
  SANDBOXD_PROCESS_OUTPUT_TOTAL_BYTES: z.coerce
    .number()
    .int()
    .min(4096)
    .default(DEFAULT_PROCESS_OUTPUT_TOTAL_BYTES),
  SANDBOXD_LOG_LEVEL: z
    .enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"])
    .default("info"),
});
export type Settings = z.infer<typeof Settings>;

export function readSettings(env: NodeJS.ProcessEnv): Settings {
  const result = Settings.safeParse(env);
  if (!result.success) {
    const lines = result.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
    throw new Error(`invalid sandboxd settings:\n  ${lines.join("\n  ")}`);
  }
  return result.data;
}
