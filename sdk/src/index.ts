/**
 * @sandpit/sdk: one SandboxProvider / SandboxInstance contract over local, Docker, Kubernetes,
 * E2B and Daytona sandboxes.
 *
 *   const provider = createProvider({ use: "local" });
 *   const sbx = await provider.create({ language: "python" });
 *   await sbx.executeCode("print(1 + 1)", "python");
 */
import { pino, type Logger } from "pino";
import { parseConfig, type SandboxSection } from "./config.ts";
import { FallbackProvider } from "./fallback.ts";
import { getProvider, registerProvider } from "./registry.ts";
import { LocalProvider, LocalProviderOptions } from "./providers/local.ts";
import { DockerProvider, DockerProviderOptions } from "./providers/docker/provider.ts";
import type { SandboxProvider } from "./types.ts";

export * from "./types.ts";
export { SandboxError, isSandboxError, type SandboxErrorCode } from "./errors.ts";
export { parseConfig, loadConfigFile, type SandpitConfig, type SandboxSection } from "./config.ts";
export { registerProvider, providerNames, type ProviderDefinition, type ProviderContext } from "./registry.ts";
export { FallbackProvider } from "./fallback.ts";
export { SandboxdClient, type SandboxdClientOptions } from "./sandboxd-client.ts";
export { SandboxdInstance, type SandboxdLifecycle } from "./sandboxd-instance.ts";
export { LocalProvider, type LocalProviderOptions } from "./providers/local.ts";
export { DockerProvider, type DockerProviderOptions } from "./providers/docker/provider.ts";
export { validateCreate } from "./create-options.ts";

registerProvider({
  name: "local",
  description: "sandboxes as host processes, isolated with bubblewrap where installed",
  options: LocalProviderOptions,
  create: (options, ctx) => new LocalProvider(options, ctx.logger),
});
registerProvider({
  name: "docker",
  description: "a container of the Sandpit sandbox image per sandbox (Docker, or Apple's container on macOS)",
  options: DockerProviderOptions,
  create: (options, ctx) => new DockerProvider(options, ctx.logger),
});

/**
 * Builds the provider a config selects: `use: "local"` gives that provider, `use: [a, b]` a
 * fallback chain. Accepts the `sandbox` section or the whole config.
 */
export function createProvider(config: SandboxSection | { sandbox: SandboxSection }, opts: { logger?: Logger } = {}): SandboxProvider {
  const section = parseConfig("sandbox" in config ? config : { sandbox: config }).sandbox;
  const logger = opts.logger ?? pino({ level: process.env.SANDPIT_LOG_LEVEL ?? "warn" });
  const build = (name: string) => {
    const def = getProvider(name);
    return def.create(def.options.parse(section[name] ?? {}), { logger: logger.child({ provider: name }) });
  };
  if (typeof section.use === "string") return build(section.use);
  return new FallbackProvider(
    section.use.map((name) => ({ name, provider: build(name) })),
    logger,
  );
}
