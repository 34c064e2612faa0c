/**
 * A provider whose implementation module is imported on first use. The E2B, Daytona and
 * Docker SDKs take about a second to load together; an app using only the local provider (or
 * only one of them) should not pay for the others.
 */
import type {
  SandboxCreateOptions,
  SandboxInfo,
  SandboxInstance,
  SandboxListOptions,
  SandboxProvider,
} from "./types.ts";

export class LazyProvider implements SandboxProvider {
  private provider: Promise<SandboxProvider> | null = null;
  private readonly load: () => Promise<SandboxProvider>;

  constructor(load: () => Promise<SandboxProvider>) {
    this.load = load;
  }

  private loaded(): Promise<SandboxProvider> {
    this.provider ??= this.load().catch((err: unknown) => {
      this.provider = null;
      throw err;
    });
    return this.provider;
  }

  async create(options: SandboxCreateOptions): Promise<SandboxInstance> {
    return (await this.loaded()).create(options);
  }

  async resume(sandboxId: string): Promise<SandboxInstance> {
    return (await this.loaded()).resume(sandboxId);
  }

  async list(options?: SandboxListOptions): Promise<SandboxInfo[]> {
    return (await this.loaded()).list(options);
  }

  async get(sandboxId: string): Promise<SandboxInfo> {
    return (await this.loaded()).get(sandboxId);
  }

  /** Never loads the implementation: a provider not loaded yet holds nothing to let go of. */
  async release(sandboxId: string): Promise<void> {
    if (this.provider) await (await this.provider).release(sandboxId);
  }

  async close(): Promise<void> {
    const p = this.provider;
    this.provider = null;
    if (p) await (await p.catch(() => null))?.close();
  }
}
