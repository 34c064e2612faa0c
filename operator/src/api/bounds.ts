/**
 * Resource bounds: the floors and ceilings a sandbox's cpu, memory, ephemeral storage and disk
 * must lie within. Limits are the platform's policy, never the caller's wish: a pool's
 * `resourceBounds` apply to its sandboxes, the platform's (operator and provisioner settings,
 * SANDPIT_MIN_* / SANDPIT_MAX_*) to what a pool leaves open and to sandboxes without a pool, and
 * an API key's `maxResources` can only lower a ceiling. The operator and the provisioner resolve
 * and check bounds with these same functions (docs/security.md#resource-limits).
 */
import { QUANTITY_PATTERN, QUANTITY_RULE, quantityValue } from "./rules.ts";

export const DIMENSIONS = ["cpu", "memory", "ephemeralStorage", "disk"] as const;
export type Dimension = (typeof DIMENSIONS)[number];
/** A quantity per dimension, each optional. */
export type Quantities = Partial<Record<Dimension, string>>;

/** Where a bound comes from, as a refusal names it. */
export type BoundSource = "pool" | "platform" | "key";
interface Bound {
  value: string;
  source: BoundSource;
}
export interface ResolvedBounds {
  min: Partial<Record<Dimension, Bound>>;
  max: Partial<Record<Dimension, Bound>>;
}

/**
 * The platform's bounds when nothing configures them. Floors: the least a sandbox can be given
 * (a zero would mean no limit at all). Ceilings: four times the operator's default limits (cpu
 * 1, memory 1Gi, ephemeral storage 2Gi, disk 1Gi), so no caller can ask for a node's worth.
 */
export const PLATFORM_BOUNDS = {
  min: { cpu: "10m", memory: "16Mi", ephemeralStorage: "16Mi", disk: "16Mi" },
  max: { cpu: "4", memory: "4Gi", ephemeralStorage: "8Gi", disk: "4Gi" },
} as const satisfies { min: Required<Quantities>; max: Required<Quantities> };
export type PlatformBounds = { min: Required<Quantities>; max: Required<Quantities> };

/** What each dimension is called in a refusal, and the setting that sets the platform's. */
const WORDS: Record<Dimension, { name: string; env: string }> = {
  cpu: { name: "cpu", env: "CPU" },
  memory: { name: "memory", env: "MEMORY" },
  ephemeralStorage: { name: "ephemeralStorage", env: "EPHEMERAL_STORAGE" },
  disk: { name: "disk (storage.size)", env: "DISK" },
};

const SOURCE: Record<BoundSource, string> = {
  pool: "this pool's",
  platform: "the platform's",
  key: "this API key's",
};

/**
 * The platform's bounds from SANDPIT_MIN_<DIM> and SANDPIT_MAX_<DIM> (DIM: CPU, MEMORY,
 * EPHEMERAL_STORAGE, DISK), PLATFORM_BOUNDS where unset. Problems are returned, one line each,
 * for the caller's start-up error.
 */
export function platformBoundsFrom(env: NodeJS.ProcessEnv): {
  bounds: PlatformBounds;
  problems: string[];
} {
  const problems: string[] = [];
  const read = (side: "min" | "max", d: Dimension): string => {
    const name = `SANDPIT_${side.toUpperCase()}_${WORDS[d].env}`;
    const raw = env[name];
    if (raw === undefined || raw === "") return PLATFORM_BOUNDS[side][d];
    if (!QUANTITY_PATTERN.test(raw) || quantityValue(raw) <= 0)
      problems.push(`${name}: must be ${QUANTITY_RULE}, above zero`);
    return raw;
  };
  const bounds: PlatformBounds = {
    min: Object.fromEntries(DIMENSIONS.map((d) => [d, read("min", d)])) as Required<Quantities>,
    max: Object.fromEntries(DIMENSIONS.map((d) => [d, read("max", d)])) as Required<Quantities>,
  };
  if (problems.length === 0)
    for (const d of DIMENSIONS)
      if (quantityValue(bounds.min[d]) > quantityValue(bounds.max[d]))
        problems.push(
          `SANDPIT_MIN_${WORDS[d].env} (${bounds.min[d]}) is above SANDPIT_MAX_${WORDS[d].env} (${bounds.max[d]})`,
        );
  return { bounds, problems };
}

/**
 * The bounds a sandbox must keep: its pool's where the pool sets them, the platform's for the
 * rest, each ceiling lowered to the API key's where that is smaller.
 */
export function resolveBounds(
  pool: { min?: Quantities; max?: Quantities } | undefined,
  platform: PlatformBounds,
  keyMax?: Quantities,
): ResolvedBounds {
  const out: ResolvedBounds = { min: {}, max: {} };
  for (const d of DIMENSIONS) {
    const min = pool?.min?.[d];
    out.min[d] = min
      ? { value: min, source: "pool" }
      : { value: platform.min[d], source: "platform" };
    const poolMax = pool?.max?.[d];
    let max: Bound = poolMax
      ? { value: poolMax, source: "pool" }
      : { value: platform.max[d], source: "platform" };
    const k = keyMax?.[d];
    if (k && quantityValue(k) < quantityValue(max.value)) max = { value: k, source: "key" };
    out.max[d] = max;
  }
  return out;
}

/**
 * Why `values` break `bounds` ("memory 100Gi is above this pool's maximum 4Gi"), or undefined
 * when they keep them. Every broken bound is named, in one sentence each.
 */
export function boundsProblem(values: Quantities, bounds: ResolvedBounds): string | undefined {
  const problems: string[] = [];
  for (const d of DIMENSIONS) {
    const v = values[d];
    if (v === undefined) continue;
    const n = quantityValue(v);
    const { min, max } = { min: bounds.min[d], max: bounds.max[d] };
    if (n <= 0) problems.push(`${WORDS[d].name} ${v} is not above zero`);
    else if (min && n < quantityValue(min.value))
      problems.push(`${WORDS[d].name} ${v} is below ${SOURCE[min.source]} minimum ${min.value}`);
    else if (max && n > quantityValue(max.value))
      problems.push(`${WORDS[d].name} ${v} is above ${SOURCE[max.source]} maximum ${max.value}`);
  }
  return problems.length ? problems.join("; ") : undefined;
}
