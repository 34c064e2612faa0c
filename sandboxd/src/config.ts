/**
 * sandboxd reads its settings from the environment (the natural interface for a container
 * entrypoint and for a parent process alike), validated strictly so a typo fails at start-up.
 */
import { z } from "zod";
import { DEFAULT_OUTPUT_CAP_BYTES, VIRTUAL_ROOT } from "./protocol.ts";

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
  /** "1": read the token from the first line of stdin and exit when stdin closes (parent gone). */
  SANDBOXD_TOKEN_STDIN: z.enum(["0", "1"]).default("0"),
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
