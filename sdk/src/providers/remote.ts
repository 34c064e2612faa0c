/**
 * Registers the providers whose sandboxes run elsewhere: Docker (a local or remote engine),
 * Kubernetes (through a Sandpit provisioner), E2B and Daytona. Their implementations, and the SDKs they use, load on first use (LazyProvider);
 * only their option schemas load here, so config validation stays cheap. Idempotent.
 */
import { LazyProvider } from "../lazy-provider.ts";
import { providerNames, registerProvider } from "../registry.ts";
import { DaytonaProviderOptions } from "./daytona-options.ts";
import { DockerProviderOptions } from "./docker/options.ts";
import { E2BProviderOptions } from "./e2b-options.ts";
import { KubernetesProvider, KubernetesProviderOptions } from "./kubernetes.ts";

export function registerRemoteProviders(): void {
  const known = new Set(providerNames());
  if (!known.has("docker")) {
    registerProvider({
      name: "docker",
      description:
        "a container of the Sandpit sandbox image per sandbox (Docker, or Apple's container on macOS)",
      options: DockerProviderOptions,
      create: (options, ctx) =>
        new LazyProvider(
          async () =>
            new (await import("./docker/provider.ts")).DockerProvider(options, ctx.logger),
        ),
    });
  }
  if (!known.has("kubernetes")) {
    registerProvider({
      name: "kubernetes",
      description:
        "sandboxes on Kubernetes, through a Sandpit provisioner (provisionerUrl, apiKey)",
      options: KubernetesProviderOptions,
      create: (options) => new KubernetesProvider(options),
    });
  }
  if (!known.has("e2b")) {
    registerProvider({
      name: "e2b",
      description: "E2B cloud sandboxes (code interpreter template), through the e2b SDK",
      options: E2BProviderOptions,
      create: (options, ctx) =>
        new LazyProvider(
          async () => new (await import("./e2b.ts")).E2BProvider(options, ctx.logger),
        ),
    });
  }
  if (!known.has("daytona")) {
    registerProvider({
      name: "daytona",
      description: "Daytona cloud sandboxes, through the @daytonaio/sdk SDK",
      options: DaytonaProviderOptions,
      create: (options, ctx) =>
        new LazyProvider(
          async () => new (await import("./daytona.ts")).DaytonaProvider(options, ctx.logger),
        ),
    });
  }
}
