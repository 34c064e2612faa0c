/**
 * A provider that tries others in order: `create` falls through to the next provider when one
 * cannot be reached (CONNECTION_FAILED), logging why; any other error is the caller's answer.
 */
import type { Logger } from "./logger.ts";
import { SandboxError } from "./errors.ts";
import type { SandboxCreateOptions, SandboxInstance, SandboxProvider } from "./types.ts";

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

  private async firstThatAnswers(
    op: string,
    call: (p: SandboxProvider) => Promise<SandboxInstance>,
    fallThroughOn: string[],
  ): Promise<SandboxInstance> {
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
