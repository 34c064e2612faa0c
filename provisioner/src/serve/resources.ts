/**
 * The native API's resource limits (Kubernetes quantities: "500m", "2", "512Mi", "1Gi") as the
 * SDK's numbers (cores, MiB), for a provider-backed sandbox. The native API validated them.
 */
import { quantityValue } from "@sandpit/operator/api";
import type { SandboxResources } from "@sandpit/sdk";
import type { Sandbox } from "../sandboxes.ts";

const MiB = 2 ** 20;

export function resourcesOf(r: NonNullable<Sandbox["spec"]["resources"]>): SandboxResources {
  const cpu = r.cpu ? quantityValue(String(r.cpu)) : undefined;
  const memory = r.memory ? quantityValue(String(r.memory)) : undefined;
  const disk = r.ephemeralStorage ? quantityValue(String(r.ephemeralStorage)) : undefined;
  return {
    ...(cpu ? { cpu } : {}),
    ...(memory ? { memoryMiB: Math.ceil(memory / MiB) } : {}),
    ...(disk ? { diskMiB: Math.ceil(disk / MiB) } : {}),
  };
}
