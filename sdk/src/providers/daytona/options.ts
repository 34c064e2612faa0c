/** Daytona provider options: apart from the provider so config validation does not load the Daytona SDK. */
import { z } from "zod";

export const DaytonaProviderOptions = z.strictObject({
  /** Daytona API key (required). */
  apiKey: z.string().min(1, "apiKey is required"),
  /** Control-plane URL; Daytona's public API by default. */
  apiUrl: z.url().default("https://app.daytona.io/api"),
  /** Region the sandboxes run in. */
  target: z.enum(["us", "eu"]).default("us"),
  /** Deadline of lifecycle operations (create, start, stop, delete); sent to Daytona in seconds. */
  timeoutMs: z.number().int().positive().default(300_000),
  /** Snapshot to create sandboxes from (Daytona's default snapshot otherwise). */
  snapshot: z.string().min(1).optional(),
  /** Minutes of inactivity before Daytona stops a sandbox (0 = never; Daytona's default 15). */
  autoStopIntervalMinutes: z.number().int().min(0).optional(),
  /** How `pause()` is done: `stop` (keeps the disk; works on every runner) or `pause` (VM runners, keeps memory). */
  pauseMode: z.enum(["stop", "pause"]).default("stop"),
  /** Poll sandbox state instead of subscribing to Daytona's event socket (the SDK's option). */
  useDeprecatedPolling: z.boolean().default(false),
});

export type DaytonaProviderOptions = z.input<typeof DaytonaProviderOptions>;
