/** Local provider options. */
import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { SandboxError } from "../../errors.ts";

/** The pool size when neither the `warm` option nor SANDPIT_LOCAL_WARM says otherwise. */
const DEFAULT_WARM = 1;
const MAX_WARM = 16;

export const LocalProviderOptions = z.strictObject({
  /** Where sandbox directories live. */
  baseDir: z.string().default(join(homedir(), ".local", "share", "sandpit")),
  /**
   * "bwrap" and "auto" (the default) run sandboxes in bubblewrap and refuse to start one where
   * it does not work; "none" runs them as plain host processes, on purpose (code you trust).
   * Default: SANDPIT_LOCAL_ISOLATION, else "auto".
   */
  isolation: z.enum(["auto", "bwrap", "none"]).optional(),
  /** With bubblewrap: false gives the sandbox a private network namespace (loopback only). */
  network: z.boolean().default(true),
  /** Cap on each captured output stream of one command. */
  outputCapBytes: z.number().int().positive().optional(),
  /** How long sandboxd may take to start. */
  startTimeoutMs: z.number().int().positive().default(15_000),
  /**
   * Blank sandboxds kept started for creates to claim (./warm-pool.ts); 0 turns the pool off.
   * Default: SANDPIT_LOCAL_WARM, else 1.
   */
  warm: z.number().int().min(0).max(MAX_WARM).optional(),
});
export type LocalProviderOptions = z.input<typeof LocalProviderOptions>;

/** The warm pool's size: the option, else SANDPIT_LOCAL_WARM, else the default. */
export function warmPoolSize(option: number | undefined, env = process.env): number {
  if (option !== undefined) return option;
  const raw = env.SANDPIT_LOCAL_WARM;
  if (raw === undefined || raw === "") return DEFAULT_WARM;
  const n = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || n > MAX_WARM)
    throw new SandboxError(
      `SANDPIT_LOCAL_WARM must be an integer from 0 to ${MAX_WARM}, got ${JSON.stringify(raw)}`,
      "INVALID_ARGUMENT",
    );
  return n;
}

const ISOLATIONS = ["auto", "bwrap", "none"] as const;
export type Isolation = (typeof ISOLATIONS)[number];

/** The isolation asked for: the option, else SANDPIT_LOCAL_ISOLATION, else "auto". */
export function isolationWanted(option: Isolation | undefined, env = process.env): Isolation {
  if (option !== undefined) return option;
  const raw = env.SANDPIT_LOCAL_ISOLATION;
  if (raw === undefined || raw === "") return "auto";
  if (!(ISOLATIONS as readonly string[]).includes(raw))
    throw new SandboxError(
      `SANDPIT_LOCAL_ISOLATION must be one of ${ISOLATIONS.join(", ")}, got ${JSON.stringify(raw)}`,
      "INVALID_ARGUMENT",
    );
  return raw as Isolation;
}
