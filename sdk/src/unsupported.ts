/**
 * What a provider cannot do: each missing feature is a SandboxError NOT_SUPPORTED naming the
 * feature and the provider, never a missing method or a silent no-op. Providers compose these
 * for the parts of the contract their backend lacks (sdk/README.md has the table).
 */
import { SandboxError } from "./errors.ts";
import type {
  CodeContext,
  GrepMatch,
  ProcessInfo,
  SandboxCommandOptions,
  SandboxCommands,
  SandboxExecutionResult,
  SandboxFileInfo,
  SandboxPty,
  WatchHandle,
} from "./types.ts";

export function notSupported(provider: string, feature: string): SandboxError {
  return new SandboxError(
    `${feature} is not supported by the ${provider} provider`,
    "NOT_SUPPORTED",
  );
}

const refuse = (provider: string, feature: string) => () =>
  Promise.reject(notSupported(provider, feature));

/** `commands` for a provider that runs commands only to completion. */
export function foregroundCommands(
  provider: string,
  run: (command: string, options?: SandboxCommandOptions) => Promise<SandboxExecutionResult>,
): SandboxCommands {
  const feature = "background commands";
  return {
    run: ((command: string, options?: SandboxCommandOptions & { background?: boolean }) => {
      if (options?.background) return Promise.reject(notSupported(provider, feature));
      return run(command, options);
    }) as SandboxCommands["run"],
    list: refuse(provider, feature) as () => Promise<ProcessInfo[]>,
    connect: refuse(provider, feature),
    kill: refuse(provider, feature),
    sendStdin: refuse(provider, feature),
    closeStdin: refuse(provider, feature),
  };
}

export function noPty(provider: string): SandboxPty {
  const feature = "terminals (pty)";
  return {
    create: refuse(provider, feature),
    connect: refuse(provider, feature),
    sendInput: refuse(provider, feature),
    resize: refuse(provider, feature),
    kill: refuse(provider, feature),
  };
}

/**
 * The code-context methods of an instance without persistent interpreters; `why`, when given,
 * says what the backend lacks, so the refusal explains itself.
 */
export function noCodeContexts(provider: string, why?: string) {
  const feature = why ? `code contexts (${why})` : "code contexts";
  return {
    createCodeContext: refuse(provider, feature) as () => Promise<CodeContext>,
    listCodeContexts: refuse(provider, feature) as () => Promise<CodeContext[]>,
    removeCodeContext: refuse(provider, feature) as () => Promise<void>,
  };
}

/**
 * The filesystem calls beyond the seed's seven, refused; a provider's filesystem class extends
 * this and overrides what its backend has.
 */
export abstract class FilesystemExtras {
  readonly #provider: string;
  constructor(provider: string) {
    this.#provider = provider;
  }
  #no(feature: string): Promise<never> {
    return Promise.reject(notSupported(this.#provider, `filesystem.${feature}`));
  }
  rename(_from: string, _to: string): Promise<void> {
    return this.#no("rename");
  }
  stat(_path: string): Promise<SandboxFileInfo> {
    return this.#no("stat");
  }
  append(_path: string, _content: string | Uint8Array, _options?: unknown): Promise<void> {
    return this.#no("append");
  }
  glob(_pattern: string, _options?: unknown): Promise<string[]> {
    return this.#no("glob");
  }
  grep(_pattern: string, _options?: unknown): Promise<GrepMatch[]> {
    return this.#no("grep");
  }
  watch(_path: string, _onEvent: unknown, _options?: unknown): Promise<WatchHandle> {
    return this.#no("watch");
  }
  readStream(_path: string, _options?: unknown): Promise<ReadableStream<Uint8Array>> {
    return this.#no("readStream");
  }
  writeStream(_path: string, _data: unknown, _options?: unknown): Promise<void> {
    return this.#no("writeStream");
  }
}
