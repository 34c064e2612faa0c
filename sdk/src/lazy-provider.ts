/**
 * A provider whose implementation module is imported on first use. The E2B, Daytona and
 * Docker SDKs take about a second to load together; an app using only the local provider (or
 * only one of them) should not pay for the others.
 */
import type { SandboxCreateOptions, SandboxInstance, SandboxProvider } from "./types.ts";

export class LazyProvider implements SandboxProvider {
  private provider: Promise<SandboxProvider> | null = null;
  private readonly load: () => Promise<SandboxProvider>;

  constructor(load: () => Promise<SandboxProvider>) {
    this.load = load;
  }

  private get(): Promise<SandboxProvider> {
    this.provider ??= this.load().catch((err: unknown) => {
      this.provider = null;
      throw err;
    });
    return this.provider;
  }

  async create(options: SandboxCreateOptions): Promise<SandboxInstance> {
    return (await this.get()).create(options);
  }

  async resume(sandboxId: string): Promise<SandboxInstance> {
    return (await this.get()).resume(sandboxId);
  }
}
