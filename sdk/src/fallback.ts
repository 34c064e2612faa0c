/**
 * A provider that tries others in order: `create` falls through to the next provider when one
 * cannot be reached (CONNECTION_FAILED), logging why; any other error is the caller's answer.
 */
import type { Logger } from "pino";
import { SandboxError } from "./errors.ts";
import type {
  SandboxCreateOptions,
  SandboxInfo,
  SandboxInstance,
  SandboxListOptions,
  SandboxProvider,
} from "./types.ts";

export interface NamedProvider {
  name: string;
  provider: SandboxProvider;
}

export class FallbackProvider implements SandboxProvider {
  private readonly chain: NamedProvider[];
  private readonly logger: Logger;

  constructor(chain: NamedProvider[], logger: Logger) {
    if (chain.length === 0)
      throw new SandboxError("a fallback chain needs at least one provider", "INVALID_ARGUMENT");
    this.chain = chain;
    this.logger = logger;
  }

  create(options: SandboxCreateOptions): Promise<SandboxInstance> {
    return this.firstThatAnswers("create", (p) => p.create(options), ["CONNECTION_FAILED"]);
  }

  /** Asks each provider in turn; the sandbox belongs to the first that knows the ID. */
  resume(sandboxId: string): Promise<SandboxInstance> {
    return this.firstThatAnswers("resume", (p) => p.resume(sandboxId), [
      "CONNECTION_FAILED",
      "NOT_FOUND",
    ]);
  }

  /** One sandbox's info from the first provider that knows the ID. */
  get(sandboxId: string): Promise<SandboxInfo> {
    return this.firstThatAnswers("find", (p) => p.get(sandboxId), [
      "CONNECTION_FAILED",
      "NOT_FOUND",
    ]);
  }

  /**
   * Every provider's sandboxes; one that cannot be reached is logged and left out, unless none
   * can be (then the error stands).
   */
  async list(options?: SandboxListOptions): Promise<SandboxInfo[]> {
    const all = await Promise.allSettled(this.chain.map(({ provider }) => provider.list(options)));
    const failed = all.flatMap((r, i) => (r.status === "rejected" ? [[i, r.reason] as const] : []));
    for (const [i, reason] of failed) {
      if (!(reason instanceof SandboxError) || reason.code !== "CONNECTION_FAILED") throw reason;
      this.logger.warn(
        { provider: this.chain[i]!.name, reason: reason.message },
        `sandbox provider ${this.chain[i]!.name} could not be reached to list sandboxes`,
      );
    }
    if (failed.length === all.length) throw failed[0]![1];
    return all.flatMap((r) => (r.status === "fulfilled" ? r.value : []));
  }

  /** Every provider lets go of the ID (those that never held it have nothing to do). */
  async release(sandboxId: string): Promise<void> {
    await Promise.all(this.chain.map(({ provider }) => provider.release(sandboxId)));
  }

  async close(): Promise<void> {
    await Promise.all(this.chain.map(({ provider }) => provider.close()));
  }

  private async firstThatAnswers<T>(
    op: string,
    call: (p: SandboxProvider) => Promise<T>,
    fallThroughOn: string[],
  ): Promise<T> {
    const reasons: string[] = [];
    let last: SandboxError | undefined;
    for (const { name, provider } of this.chain) {
      try {
        return await call(provider);
      } catch (err) {
        if (!(err instanceof SandboxError) || !fallThroughOn.includes(err.code)) throw err;
        last = err;
        reasons.push(`${name}: ${err.message}`);
        this.logger.warn(
          { provider: name, code: err.code, reason: err.message },
          `sandbox provider ${name} failed to ${op}; trying the next one`,
        );
      }
    }
    throw new SandboxError(
      `no provider could ${op} the sandbox:\n  ${reasons.join("\n  ")}`,
      last!.code,
      last,
    );
  }
}
