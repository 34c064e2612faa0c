/** Kubernetes provider options: how to reach the Sandpit provisioner. */
import { z } from "zod";

export const KubernetesProviderOptions = z.strictObject({
  /** Base URL of the provisioner, e.g. http://sandpit-provisioner.sandpit-system:8080 */
  provisionerUrl: z.string().url(),
  apiKey: z.string().min(24, "apiKey: the provisioner's API keys are at least 24 characters"),
  /** SandboxPool to take sandboxes from; the provisioner's default when omitted. */
  pool: z.string().optional(),
  /** How long create and resume may wait for a sandbox to be Ready. */
  readyTimeoutMs: z.number().int().positive().default(180_000),
  /** Deadline of calls that do not run user code. */
  requestTimeoutMs: z.number().int().positive().default(30_000),
});
export type KubernetesProviderInput = z.input<typeof KubernetesProviderOptions>;
