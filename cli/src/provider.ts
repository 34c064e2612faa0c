/**
 * The provider for one CLI invocation. Every invocation is a new process, so a command reaches
 * its sandbox again by ID (`resume`, or `get` where nothing may change) and lets go of it at the
 * end with `close()`: the provider's connections close and the sandbox is kept.
 */
import type { SandboxInstance, SandboxProvider } from "@sandpit/sdk";
import { resolveConfig } from "./config.ts";
import { forgetTicket } from "./exec-ticket.ts";

export interface GlobalOptions {
  config?: string;
  json?: boolean;
}

export async function openProvider(opts: GlobalOptions): Promise<SandboxProvider> {
  const { config } = await resolveConfig(opts.config);
  const { createProvider } = await import("@sandpit/sdk");
  // The SDK's default logger writes only warnings and errors, to stderr: stdout stays results.
  return createProvider(config);
}

/** Runs `fn` with a provider and closes it afterwards, whatever happened. */
export async function withProvider<T>(
  opts: GlobalOptions,
  fn: (provider: SandboxProvider) => Promise<T>,
): Promise<T> {
  const provider = await openProvider(opts);
  try {
    return await fn(provider);
  } finally {
    await provider.close().catch(() => undefined);
  }
}

/**
 * Runs `fn` with the sandbox `id`, resumed (started again if it was paused). Its exec ticket is
 * dropped first: whatever `fn` does (pause, rm, a new lifetime) may make it stale.
 */
export async function withSandbox<T>(
  opts: GlobalOptions,
  id: string,
  fn: (sandbox: SandboxInstance, provider: SandboxProvider) => Promise<T>,
): Promise<T> {
  forgetTicket(id, opts.config);
  return withProvider(opts, async (provider) => fn(await provider.resume(id), provider));
}
