/** E2B provider options: apart from the provider so config validation does not load the E2B SDK. */
import { z } from "zod";

export const E2BProviderOptions = z.strictObject({
  /** E2B API key (required). */
  apiKey: z.string().min(1, "apiKey is required"),
  /** Custom sandbox template; default is the code interpreter template. */
  templateId: z.string().min(1).optional(),
  /** Sandbox lifetime: E2B stops a sandbox this long after create/resume (default 5 minutes). */
  timeoutMs: z.number().int().positive().default(300_000),
  /** Control-plane base URL (self-hosted E2B or a test fake); default https://api.<domain>. */
  apiUrl: z.url().optional(),
  /** Data-plane base URL for every sandbox (self-hosted or a test fake); default per sandbox. */
  sandboxUrl: z.url().optional(),
  /** E2B domain (default e2b.app); used for URLs and getHost. */
  domain: z.string().min(1).optional(),
  /** Deadline of each HTTP request to E2B (default the SDK's 60 s). */
  requestTimeoutMs: z.number().int().positive().optional(),
  /**
   * What getHost returns. `{host}` is the SDK's `<port>-<sandboxId>.<domain>`, `{port}` and
   * `{sandboxId}` are what they say. Default `{host}:443` (E2B serves sandbox ports over TLS).
   * A deployment where sandbox ports are reachable directly (a local fake sharing the host
   * network) sets e.g. `127.0.0.1:{port}`.
   */
  hostTemplate: z.string().min(1).default("{host}:443"),
});

export type E2BProviderOptions = z.input<typeof E2BProviderOptions>;
