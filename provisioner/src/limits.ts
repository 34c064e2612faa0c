/**
 * Limits are policy, not a request: every create, through whichever API (native, DeerFlow,
 * E2B) and whichever store (the cluster's, or `sandpit serve`'s), passes this one check before
 * anything is written. The cpu, memory, ephemeral storage and disk a sandbox would get (what it
 * asks for, else its pool's template) must lie within its pool's bounds, the platform's where the
 * pool sets none, and under its API key's ceilings; otherwise a 400 names the bound broken. The
 * operator checks the same bounds again (a Sandbox applied with kubectl never met this code).
 */
import {
  type PlatformBounds,
  type Quantities,
  type SandboxPool,
  boundsProblem,
  resolveBounds,
} from "@sandpit/operator/api";
import type { CreateInput } from "./store.ts";

/**
 * A create refused before anything was written: a 400 (limits out of bounds) or a 404 (no such
 * pool). The API layer's errors (./api/errors.ts) answer it with its code.
 */
export class CreateRefused extends Error {
  readonly code: "INVALID_ARGUMENT" | "NOT_FOUND";
  constructor(code: CreateRefused["code"], message: string) {
    super(message);
    this.code = code;
  }
}

/** Throws a 400 INVALID_ARGUMENT naming the bound a create would break. */
export function admitResources(
  input: CreateInput,
  pool: SandboxPool | undefined,
  platform: PlatformBounds,
): void {
  const t = pool?.spec.template;
  const r = { ...t?.resources, ...input.spec.resources };
  const shared = input.spec.storage?.sharedClaim ?? t?.storage?.sharedClaim;
  const size = input.spec.storage?.size ?? t?.storage?.size;
  const values: Quantities = {
    ...(r.cpu ? { cpu: r.cpu } : {}),
    ...(r.memory ? { memory: r.memory } : {}),
    ...(r.ephemeralStorage ? { ephemeralStorage: r.ephemeralStorage } : {}),
    ...(size && !shared ? { disk: size } : {}),
  };
  const problem = boundsProblem(
    values,
    resolveBounds(pool?.spec.resourceBounds, platform, input.maxResources),
  );
  if (problem) throw new CreateRefused("INVALID_ARGUMENT", `resources: ${problem}`);
}

/** The pool a create names, or a 404 before anything is made (never a sandbox that waits). */
export async function existingPool(
  name: string | undefined,
  getPool: (name: string) => Promise<SandboxPool | undefined>,
): Promise<SandboxPool | undefined> {
  if (!name) return undefined;
  const pool = await getPool(name);
  if (!pool) throw new CreateRefused("NOT_FOUND", `no SandboxPool "${name}"`);
  return pool;
}
