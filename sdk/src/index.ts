/**
 * @sandpit/sdk: one SandboxProvider / SandboxInstance contract over local, Docker, Kubernetes,
 * E2B and Daytona sandboxes.
 *
 *   const provider = createProvider({ use: "local" });
 *   const sbx = await provider.create({ language: "python" });
 *   await sbx.executeCode("print(1 + 1)", "python");
 */
import { parseConfig, type SandboxSection } from "./config.ts";
import { FallbackProvider } from "./fallback.ts";
import { getProvider } from "./registry.ts";
import { registerBuiltinProviders } from "./providers/builtin.ts";
import { parseOptions } from "./parse-options.ts";
import { stderrLogger, type Logger } from "./logger.ts";
import type { SandboxProvider } from "./types.ts";

export * from "./types.ts";
export { SandboxError, isSandboxError, type SandboxErrorCode } from "./errors.ts";
export { parseConfig, loadConfigFile, type SandpitConfig, type SandboxSection } from "./config.ts";
export {
  registerProvider,
  providerNames,
  type ProviderDefinition,
  type ProviderContext,
} from "./registry.ts";
export { FallbackProvider } from "./fallback.ts";
export { SandboxdClient, type SandboxdClientOptions } from "./sandboxd-client.ts";
export { SandboxdInstance, type SandboxdLifecycle } from "./sandboxd-instance.ts";
export {
  sandboxdConnection,
  sandboxdDefaults,
  type SandboxdConnection,
  type SandboxDefaults,
} from "./sandboxd-connection.ts";
export { LocalProvider } from "./providers/local/index.ts";
export type { LocalProviderOptions } from "./providers/local/options.ts";
export { LazyProvider } from "./lazy-provider.ts";
export type { Logger, LogFn } from "./logger.ts";
export {
  createE2BProvider,
  createDaytonaProvider,
  createDockerProvider,
  type FactoryOptions,
} from "./factories.ts";
// Provider classes with heavy SDKs are separate entry points: @sandpit/sdk/docker, /e2b, /daytona.
export type { DockerProviderOptions } from "./providers/docker/options.ts";
export type { E2BProviderOptions } from "./providers/e2b/options.ts";
export type { DaytonaProviderOptions } from "./providers/daytona/options.ts";
export { validateCreate } from "./create-options.ts";

registerBuiltinProviders();

/**
 * Builds the provider a config selects: `use: "local"` gives that provider, `use: [a, b]` a
 * fallback chain. Accepts the `sandbox` section or the whole config. Logs go to `logger` (any
 * pino-compatible logger); without one, only warnings and errors are written, to stderr.
 */
export function createProvider(
  config: SandboxSection | { sandbox: SandboxSection },
  opts: { logger?: Logger } = {},
): SandboxProvider {
  const section = parseConfig("sandbox" in config ? config : { sandbox: config }).sandbox;
  const logger = opts.logger ?? stderrLogger();
  const build = (name: string) => {
    const def = getProvider(name);
    // A provider named in `use` with no section of its own gets its defaults, which fails
    // clearly when it has required options (an API key, say).
    const options = parseOptions(
      def.options,
      section[name] ?? {},
      `Sandpit config: sandbox.${name}`,
    );
    return def.create(options, { logger: logger.child({ provider: name }) });
  };
  if (typeof section.use === "string") return build(section.use);
  return new FallbackProvider(
    section.use.map((name) => ({ name, provider: build(name) })),
    logger,
  );
}
