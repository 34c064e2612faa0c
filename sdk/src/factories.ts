/**
 * Factories for the providers whose SDKs are optional peer dependencies: `createE2BProvider` and
 * `createDaytonaProvider` (Jinba's names and shapes: options in, a SandboxProvider out) and
 * `createDockerProvider`. Options are checked at once; the provider's module, and the SDK it
 * needs, load on first use, and a missing SDK is a NOT_SUPPORTED error naming the package.
 */
import { LazyProvider } from "./lazy-provider.ts";
import type { Logger } from "./logger.ts";
import { loadWithPackages } from "./optional-package.ts";
import { parseOptions } from "./parse-options.ts";
import { DaytonaProviderOptions } from "./providers/daytona/options.ts";
import { DockerProviderOptions } from "./providers/docker/options.ts";
import { E2BProviderOptions } from "./providers/e2b/options.ts";
import type { SandboxProvider } from "./types.ts";

export interface FactoryOptions {
  /** Where the provider logs; nothing is logged without one. */
  logger?: Logger | undefined;
}

export function createE2BProvider(
  options: E2BProviderOptions,
  { logger }: FactoryOptions = {},
): SandboxProvider {
  const parsed = parseOptions(E2BProviderOptions, options, "e2b provider options");
  return new LazyProvider(() =>
    loadWithPackages("e2b", ["e2b", "@e2b/code-interpreter"], async () => {
      const { E2BProvider } = await import("./providers/e2b/index.ts");
      return new E2BProvider(parsed, logger);
    }),
  );
}

export function createDaytonaProvider(
  options: DaytonaProviderOptions,
  { logger }: FactoryOptions = {},
): SandboxProvider {
  const parsed = parseOptions(DaytonaProviderOptions, options, "daytona provider options");
  return new LazyProvider(() =>
    loadWithPackages("daytona", ["@daytonaio/sdk"], async () => {
      const { DaytonaProvider } = await import("./providers/daytona/index.ts");
      return new DaytonaProvider(parsed, logger);
    }),
  );
}

export function createDockerProvider(
  options: DockerProviderOptions = {},
  { logger }: FactoryOptions = {},
): SandboxProvider {
  const parsed = parseOptions(DockerProviderOptions, options, "docker provider options");
  return new LazyProvider(() =>
    loadWithPackages("docker", ["dockerode"], async () => {
      const { DockerProvider } = await import("./providers/docker/index.ts");
      return new DockerProvider(parsed, logger);
    }),
  );
}
