/**
 * Code contexts on sandboxd (its /v1/contexts routes, docs/code-contexts.md): persistent
 * interpreters whose cells share state and answer with rich results. Used by SandboxdInstance
 * for the local, docker and kubernetes providers.
 */
import { LANGUAGES, type CellEvent, type ContextInfo } from "@sandpit/sandboxd/wire";
import { parseOutput } from "@sandpit/sandboxd/wire";
import { SandboxError } from "../errors.ts";
import { asSandboxError, fromBody, ndjson, type SandboxdClient } from "../sandboxd-client.ts";
import type {
  CodeContext,
  CodeContextOptions,
  CodeExecutionOptions,
  CodeExecutionResult,
  CodeResult,
  SandboxLanguage,
} from "../types.ts";

/** A streamed cell still needs this long beyond its own timeout for its last line. */
const GRACE_MS = 15_000;
const DEFAULT_TIMEOUT_MS = 5 * 60_000;

type WithClient = <T>(op: (c: SandboxdClient) => Promise<T>) => Promise<T>;

export interface ContextDefaults {
  /** The sandbox's language: a context's language when none is asked for. */
  language: SandboxLanguage;
  workingDirectory?: string | undefined;
  timeoutMs?: number | undefined;
}

export class SandboxdCodeContexts {
  private readonly with: WithClient;
  private readonly defaults: ContextDefaults;

  constructor(withClient: WithClient, defaults: ContextDefaults) {
    this.with = withClient;
    this.defaults = defaults;
  }

  async create(options: CodeContextOptions = {}): Promise<CodeContext> {
    if (options === null || typeof options !== "object") {
      throw new SandboxError("options must be an object", "INVALID_ARGUMENT");
    }
    const language = options.language ?? this.defaults.language;
    checkLanguage(language);
    const cwd = options.cwd ?? this.defaults.workingDirectory;
    const info = await this.with(async (c) => {
      const res = await c.send("POST", "/v1/contexts", {
        body: JSON.stringify({ language, ...(cwd === undefined ? {} : { cwd }) }),
        headers: { "content-type": "application/json" },
      });
      return (await res.json()) as ContextInfo;
    });
    return toContext(info);
  }

  async list(): Promise<CodeContext[]> {
    const { contexts } = await this.with(async (c) => {
      const res = await c.send("GET", "/v1/contexts");
      return (await res.json()) as { contexts: ContextInfo[] };
    });
    return contexts.map(toContext);
  }

  async remove(context: CodeContext | string): Promise<void> {
    const id = contextId(context);
    try {
      await this.with(async (c) => (await c.send("DELETE", `/v1/contexts/${id}`)).dump());
    } catch (err) {
      if (err instanceof SandboxError && err.code === "NOT_FOUND") return; // already gone
      throw err;
    }
  }

  /**
   * Runs a cell in `context` (sandboxd refuses one of another language); the result carries its
   * output, results and exception.
   */
  async execute(
    code: string,
    language: SandboxLanguage,
    context: CodeContext | string,
    o: CodeExecutionOptions,
  ): Promise<CodeExecutionResult> {
    const id = contextId(context);
    if (o.cwd !== undefined) {
      throw new SandboxError(
        "cwd cannot be set per cell: a context keeps its own working directory (set it with createCodeContext)",
        "INVALID_ARGUMENT",
      );
    }
    const timeoutMs = o.timeoutMs ?? this.defaults.timeoutMs;
    const signal = o.signal;
    const out: CodeExecutionResult = {
      success: true,
      stdout: "",
      stderr: "",
      durationMs: 0,
      results: [],
    };
    let ended = false;
    await this.with(async (c) => {
      const res = await c.send("POST", `/v1/contexts/${id}/execute`, {
        body: JSON.stringify({
          code,
          language,
          ...(o.envs === undefined ? {} : { env: o.envs }),
          ...(timeoutMs === undefined ? {} : { timeoutMs }),
        }),
        headers: { "content-type": "application/json", accept: "application/x-ndjson" },
        timeoutMs: (timeoutMs ?? DEFAULT_TIMEOUT_MS) + GRACE_MS,
        signal,
      });
      try {
        for await (const event of ndjson<CellEvent>(res)) {
          ended = apply(out, event, o) || ended;
        }
      } catch (err) {
        signal?.throwIfAborted();
        throw asSandboxError(err, "reading the cell's output stream");
      }
    });
    if (!ended) {
      throw new SandboxError(
        "the cell's output stream ended before the cell did",
        "CONNECTION_FAILED",
      );
    }
    const output = parseOutput(out.stdout);
    if (output !== undefined) out.output = output;
    return out;
  }
}

/** Folds one event into the result; true at the cell's end. */
function apply(out: CodeExecutionResult, event: CellEvent, o: CodeExecutionOptions): boolean {
  switch (event.type) {
    case "stdout":
      out.stdout += event.data;
      o.onStdout?.(event.data);
      return false;
    case "stderr":
      out.stderr += event.data;
      o.onStderr?.(event.data);
      return false;
    case "result": {
      const result = event.result as CodeResult;
      out.results.push(result);
      o.onResult?.(result);
      return false;
    }
    case "error":
      out.success = false;
      out.error = {
        name: event.error.name,
        message: event.error.value,
        traceback: event.error.traceback,
      };
      return false;
    case "failure":
      throw fromBody(event.error);
    case "end":
      if (event.timedOut) {
        throw new SandboxError(
          `the cell ran past its timeout and was interrupted after ${event.durationMs} ms; the context keeps its state`,
          "TIMEOUT",
        );
      }
      out.durationMs = event.durationMs;
      return true;
  }
}

function checkLanguage(language: unknown): asserts language is SandboxLanguage {
  if (!(LANGUAGES as readonly unknown[]).includes(language)) {
    throw new SandboxError(
      `unknown language ${JSON.stringify(language)}: use "python" or "typescript"`,
      "INVALID_ARGUMENT",
    );
  }
}

function contextId(context: CodeContext | string): string {
  const id = typeof context === "string" ? context : context?.id;
  if (typeof id !== "string" || !/^[A-Za-z0-9-]{1,64}$/.test(id)) {
    throw new SandboxError("context must be a CodeContext or its id", "INVALID_ARGUMENT");
  }
  return id;
}

function toContext(info: ContextInfo): CodeContext {
  return { id: info.id, language: info.language, cwd: info.cwd };
}
