/**
 * The native API's resource limits (Kubernetes quantities: "500m", "2", "512Mi", "1Gi") as the
 * SDK's numbers (cores, MiB), for a provider-backed sandbox.
 */
import type { SandboxResources } from "@sandpit/sdk";
import type { Sandbox } from "../sandboxes.ts";

const BINARY: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };
const DECIMAL: Record<string, number> = { k: 1e3, M: 1e6, G: 1e9, T: 1e12, "": 1 };

/** A quantity in units of `unit` bytes (memory) or cores (cpu, with "m" for thousandths). */
function quantity(q: string, unit: number): number | undefined {
  const m = /^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T|)$/.exec(q.trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  const suffix = m[2]!;
  if (suffix === "m") return n / 1000 / unit;
  return (n * (BINARY[suffix] ?? DECIMAL[suffix] ?? 1)) / unit;
}

export function resourcesOf(r: NonNullable<Sandbox["spec"]["resources"]>): SandboxResources {
  const cpu = r.cpu ? quantity(String(r.cpu), 1) : undefined;
  const memory = r.memory ? quantity(String(r.memory), 2 ** 20) : undefined;
  const disk = r.ephemeralStorage ? quantity(String(r.ephemeralStorage), 2 ** 20) : undefined;
  return {
    ...(cpu ? { cpu } : {}),
    ...(memory ? { memoryMiB: Math.ceil(memory) } : {}),
    ...(disk ? { diskMiB: Math.ceil(disk) } : {}),
  };
}
