/**
 * The SDK contract: Jinba's `sandbox-core` interfaces, names and shapes kept exactly, extended
 * compatibly (optional fields only). Every provider implements it and passes the shared
 * contract suite in test/contract/.
 *
 * Rules all providers follow: milliseconds everywhere; a non-zero exit code is a result, not an
 * exception; `output` is stdout parsed as JSON (or its last line); provider errors become
 * SandboxError; `packages` are installed before `create` resolves; TypeScript runs without a
 * compile step; `resume(id)` after `pause()` finds the same files.
 */

export type SandboxLanguage = "python" | "typescript";

export interface SandboxProvider {
  /** Creates a new sandbox instance (or, for a known thread, returns the existing one). */
  create(options: SandboxCreateOptions): Promise<SandboxInstance>;
  /** Resumes an existing sandbox by ID; NOT_FOUND when there is none. */
  resume(sandboxId: string): Promise<SandboxInstance>;
}

export interface SandboxInstance {
  readonly sandboxId: string;
  readonly commands: SandboxCommands;
  readonly filesystem: SandboxFilesystem;

  executeCode(
    code: string,
    language: SandboxLanguage,
    options?: CodeExecutionOptions,
  ): Promise<CodeExecutionResult>;

  /** Stops the sandbox and deletes its data. */
  kill(): Promise<void>;
  /** Stops the sandbox but keeps its files; `resume(sandboxId)` brings it back. */
  pause(): Promise<void>;
  /** Address (host:port, no scheme) at which a server listening on `port` inside is reached. */
  getHost(port: number): Promise<string>;
}

export interface SandboxCommands {
  run(command: string, options?: SandboxCommandOptions): Promise<SandboxExecutionResult>;
}

export interface SandboxFilesystem {
  read(path: string): Promise<string>;
  readBytes(path: string): Promise<Uint8Array>;
  write(path: string, content: string | Uint8Array): Promise<void>;
  list(path: string): Promise<SandboxFileInfo[]>;
  exists(path: string): Promise<boolean>;
  /** Creates the directory and any missing parents; succeeds if it already exists. */
  mkdir(path: string): Promise<void>;
  /** Removes a file or a directory with everything in it. */
  remove(path: string): Promise<void>;
}

export interface SandboxCreateOptions {
  language: SandboxLanguage;
  /** Installed with pip (python) or npm (typescript) before `create` resolves. */
  packages?: string[];
  envs?: Record<string, string>;
  /** Default working directory of commands and code (default /mnt/user-data/workspace). */
  workingDirectory?: string;
  /** Default deadline of each command and code execution in this sandbox. */
  timeoutMs?: number;
  /** Sandpit extension: the conversation this sandbox belongs to; same thread, same sandbox. */
  threadId?: string;
  /** Sandpit extension: the user owning the thread (sandboxes are separated per user). */
  userId?: string;
}

export interface SandboxCommandOptions {
  cwd?: string;
  envs?: Record<string, string>;
  timeoutMs?: number;
  /** Text written to the command's standard input. */
  stdin?: string;
  /** Called with output as it arrives (the result still carries all of it). */
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
}

export interface CodeExecutionOptions {
  envs?: Record<string, string>;
  timeoutMs?: number;
  cwd?: string;
}

export interface CodeExecutionResult {
  success: boolean;
  /** Parsed JSON output when available. */
  output?: unknown;
  stdout: string;
  stderr: string;
  durationMs: number;
  error?: {
    name: string;
    message: string;
    traceback?: string;
  };
}

export interface SandboxExecutionResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

export interface SandboxFileInfo {
  name: string;
  /** Absolute path inside the sandbox. */
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  modifiedTime?: Date;
}
