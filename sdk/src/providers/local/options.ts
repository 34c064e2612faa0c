/** Local provider options. */
import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";

export const LocalProviderOptions = z.strictObject({
  /** Where sandbox directories live. */
  baseDir: z.string().default(join(homedir(), ".local", "share", "sandpit")),
  /** "auto" uses bubblewrap when it works on this host and says so in the log when it does not. */
  isolation: z.enum(["auto", "bwrap", "none"]).default("auto"),
  /** With bubblewrap: false gives the sandbox a private network namespace (loopback only). */
  network: z.boolean().default(true),
  /** Cap on each captured output stream of one command. */
  outputCapBytes: z.number().int().positive().optional(),
  /** How long sandboxd may take to start. */
  startTimeoutMs: z.number().int().positive().default(15_000),
});
export type LocalProviderOptions = z.input<typeof LocalProviderOptions>;
