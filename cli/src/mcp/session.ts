/**
 * One MCP session's sandboxes: the current one (created on first use, or chosen by ID), every
 * one reached by ID, and a persistent code context per sandbox and language so cells share
 * variables. When the session ends, sandboxes it created are removed (unless kept) and the
 * others are only let go.
 */
import type {
  CodeContext,
  SandboxCreateOptions,
  SandboxInstance,
  SandboxLanguage,
  SandboxProvider,
} from "@sandpit/sdk";

export interface SessionOptions {
  /** Language of the sandbox created when a tool needs one and none was chosen. */
  language: SandboxLanguage;
  /** Keep the sandboxes this session created when it ends. */
  keep: boolean;
}

export class McpSession {
  private readonly provider: SandboxProvider;
  private readonly options: SessionOptions;
  private current: Promise<SandboxInstance> | undefined;
  private readonly byId = new Map<string, Promise<SandboxInstance>>();
  private readonly created = new Set<string>();
  private readonly contexts = new Map<string, Promise<CodeContext>>();

  constructor(provider: SandboxProvider, options: SessionOptions) {
    this.provider = provider;
    this.options = options;
  }

  /** A new sandbox, which becomes the session's current one. */
  async create(options: Partial<SandboxCreateOptions>): Promise<SandboxInstance> {
    const pending = this.provider.create({ language: this.options.language, ...options });
    const sandbox = await pending;
    this.created.add(sandbox.sandboxId);
    this.byId.set(sandbox.sandboxId, pending);
    this.current = pending;
    return sandbox;
  }

  /** The sandbox `id` (resumed when paused), which becomes the current one. */
  async use(id: string): Promise<SandboxInstance> {
    const sandbox = await this.get(id);
    this.current = Promise.resolve(sandbox);
    return sandbox;
  }

  /** The sandbox a tool call means: the one named, else the current one, else a new one. */
  async get(id?: string): Promise<SandboxInstance> {
    if (id === undefined) {
      if (!this.current) {
        // Concurrent first calls share one new sandbox.
        this.current = this.create({}).catch((err: unknown) => {
          this.current = undefined;
          throw err;
        });
      }
      return this.current;
    }
    let pending = this.byId.get(id);
    if (!pending) {
      pending = this.provider.resume(id);
      this.byId.set(id, pending);
      pending.catch(() => this.byId.delete(id));
    }
    return pending;
  }

  /** The session's code context for this sandbox and language, created on first use. */
  context(sandbox: SandboxInstance, language: SandboxLanguage): Promise<CodeContext> {
    const key = `${sandbox.sandboxId}\0${language}`;
    let pending = this.contexts.get(key);
    if (!pending) {
      pending = sandbox.createCodeContext({ language });
      this.contexts.set(key, pending);
      pending.catch(() => this.contexts.delete(key));
    }
    return pending;
  }

  /** Drops the context so the next cell starts a fresh interpreter. */
  async resetContext(sandbox: SandboxInstance, language: SandboxLanguage): Promise<void> {
    const key = `${sandbox.sandboxId}\0${language}`;
    const pending = this.contexts.get(key);
    this.contexts.delete(key);
    if (pending) await sandbox.removeCodeContext(await pending).catch(() => undefined);
  }

  async kill(id?: string): Promise<string> {
    const sandbox = await this.get(id);
    await sandbox.kill();
    this.forget(sandbox.sandboxId);
    return sandbox.sandboxId;
  }

  private forget(id: string): void {
    const current = this.current;
    this.byId.delete(id);
    this.created.delete(id);
    for (const key of [...this.contexts.keys()])
      if (key.startsWith(`${id}\0`)) this.contexts.delete(key);
    if (current)
      void current.then(
        (s) => s.sandboxId === id && this.current === current && (this.current = undefined),
        () => undefined,
      );
  }

  async close(): Promise<void> {
    if (!this.options.keep) {
      await Promise.all(
        [...this.created].map(async (id) =>
          (await this.byId.get(id))?.kill().catch(() => undefined),
        ),
      );
    }
    await this.provider.close().catch(() => undefined);
  }
}
