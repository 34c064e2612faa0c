/**
 * Providers by name. Adding a provider is one `registerProvider` call: its options schema joins
 * the config schema (so `sandbox.<name>` is validated strictly) and `sandbox.use: <name>` selects it.
 */
import type { Logger } from "./logger.ts";
import type { z } from "zod";
import { SandboxError } from "./errors.ts";
import type { SandboxProvider } from "./types.ts";

export interface ProviderContext {
  logger: Logger;
}

export interface ProviderDefinition<S extends z.ZodType = z.ZodType> {
  name: string;
  /** One line for docs and error messages. */
  description: string;
  /** Options under `sandbox.<name>`; must reject unknown keys. */
  options: S;
  create(options: z.output<S>, ctx: ProviderContext): SandboxProvider;
}

const providers = new Map<string, ProviderDefinition>();

export function registerProvider<S extends z.ZodType>(def: ProviderDefinition<S>): void {
  if (providers.has(def.name))
    throw new SandboxError(`provider ${def.name} is already registered`, "INVALID_ARGUMENT");
  providers.set(def.name, def as unknown as ProviderDefinition);
}

export function getProvider(name: string): ProviderDefinition {
  const def = providers.get(name);
  if (!def) {
    throw new SandboxError(
      `unknown provider ${JSON.stringify(name)} (registered: ${providerNames().join(", ")})`,
      "INVALID_ARGUMENT",
    );
  }
  return def;
}

export function providerNames(): string[] {
  return [...providers.keys()];
}
