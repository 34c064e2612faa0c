/**
 * Registers the providers Sandpit ships: local, docker, kubernetes, e2b and daytona. Docker,
 * E2B and Daytona load their implementations, and the SDKs they use (optional peer
 * dependencies), on first use (factories.ts); only their option schemas load here, so config
 * validation stays cheap. Idempotent: a provider already registered is left as it is.
 */
import { createDaytonaProvider, createDockerProvider, createE2BProvider } from "../factories.ts";
import { providerNames, registerProvider } from "../registry.ts";
import { DaytonaProviderOptions } from "./daytona/options.ts";
import { DockerProviderOptions } from "./docker/options.ts";
import { E2BProviderOptions } from "./e2b/options.ts";
import { KubernetesProvider } from "./kubernetes/index.ts";
import { KubernetesProviderOptions } from "./kubernetes/options.ts";
import { LocalProvider } from "./local/index.ts";
import { LocalProviderOptions } from "./local/options.ts";

export function registerBuiltinProviders(): void {
  const known = new Set(providerNames());
  if (!known.has("local")) {
    registerProvider({
      name: "local",
      description: "sandboxes as host processes, isolated with bubblewrap where installed",
      options: LocalProviderOptions,
      create: (options, ctx) => new LocalProvider(options, ctx.logger),
    });
  }
  if (!known.has("docker")) {
    registerProvider({
      name: "docker",
      description:
        "a container of the Sandpit sandbox image per sandbox (Docker, or Apple's container on macOS)",
      options: DockerProviderOptions,
      create: (options, ctx) => createDockerProvider(options, ctx),
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
      create: (options, ctx) => createE2BProvider(options, ctx),
    });
  }
  if (!known.has("daytona")) {
    registerProvider({
      name: "daytona",
      description: "Daytona cloud sandboxes, through the @daytonaio/sdk SDK",
      options: DaytonaProviderOptions,
      create: (options, ctx) => createDaytonaProvider(options, ctx),
    });
  }
}
