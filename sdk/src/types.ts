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
  /** The sandboxes this provider can reach, optionally only those carrying every given label. */
  list(options?: SandboxListOptions): Promise<SandboxInfo[]>;
  /** One sandbox's info without touching it (a paused sandbox stays paused); NOT_FOUND if none. */
  get(sandboxId: string): Promise<SandboxInfo>;
  /**
   * Lets go of a sandbox without stopping it: this process's connections and port forwards
   * close, the sandbox keeps running (for its thread, or until its lifetime ends).
   */
  release(sandboxId: string): Promise<void>;
  /** Closes everything this provider holds open (connections, timers); sandboxes are kept. */
  close(): Promise<void>;
}

export interface SandboxListOptions {
  /** Only sandboxes carrying every one of these labels (E2B: metadata). */
  labels?: Record<string, string>;
}

/** `failed`: the backend gave up on the sandbox (e.g. its packages never installed). */
export type SandboxState = "starting" | "running" | "paused" | "stopping" | "failed";

/** What a provider knows about a sandbox, read without side effects. */
export interface SandboxInfo {
  sandboxId: string;
  /** The provider's name in the config (`local`, `docker`, `kubernetes`, `e2b`, `daytona`). */
  provider: string;
  state: SandboxState;
  language?: SandboxLanguage;
  labels: Record<string, string>;
  threadId?: string;
  userId?: string;
  /** The image, pool, template or snapshot the sandbox was made from, where the backend says. */
  template?: string;
  createdAt?: Date;
  /** When the sandbox's lifetime ends (it is stopped then), if it has one. */
  expiresAt?: Date;
  resources?: SandboxResources;
}

/** Compute for one sandbox; the backend's own defaults (or a platform's limits) apply otherwise. */
export interface SandboxResources {
  /** CPU cores (fractions allowed: 0.5). */
  cpu?: number;
  memoryMiB?: number;
  /** Writable disk for the sandbox's files. */
  diskMiB?: number;
}

/** Where a sandbox may connect: nowhere, anywhere, or only to the listed hosts or CIDRs. */
export type SandboxNetwork = "deny" | "internet" | { allow: string[] };

/** Storage of the backend's mounted into the sandbox. */
export interface SandboxMount {
  /** Docker and local: a host path; Kubernetes: a PersistentVolumeClaim name. */
  source: string;
  /** Absolute path inside the sandbox. */
  target: string;
  readOnly?: boolean;
}

/** A URL for a port inside the sandbox, and the headers a request to it must carry (if any). */
export interface SandboxUrl {
  url: string;
  headers: Record<string, string>;
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
  /** A full URL (with scheme) for `port` inside, with the headers a private preview needs. */
  getUrl(port: number): Promise<SandboxUrl>;
  /** Ends the sandbox `timeoutMs` from now (replacing its previous lifetime). */
  setTimeout(timeoutMs: number): Promise<void>;
  /** The same info as `provider.get(sandboxId)`. */
  getInfo(): Promise<SandboxInfo>;

  /** Terminals: a shell (or any command) on a pseudo-terminal, bytes both ways. */
  readonly pty: SandboxPty;

  /**
   * A persistent interpreter: cells run with `executeCode(..., {context})` share variables,
   * imports and functions until the context is removed.
   */
  createCodeContext(options?: CodeContextOptions): Promise<CodeContext>;
  listCodeContexts(): Promise<CodeContext[]>;
  /** Stops the context's interpreter; succeeds if it is already gone. */
  removeCodeContext(context: CodeContext | string): Promise<void>;
}

export interface SandboxCommands {
  /** Runs to completion: a non-zero exit code is a result, not an error. */
  run(
    command: string,
    options?: SandboxCommandOptions & { background?: false },
  ): Promise<SandboxExecutionResult>;
  /**
   * Starts the command and returns at once with a handle; the process outlives the call, the
   * handle and the client. Its stdin stays open (after `stdin`, if given) until `closeStdin()`.
   */
  run(
    command: string,
    options: SandboxCommandOptions & { background: true },
  ): Promise<CommandHandle>;
  /** Background processes and terminals the sandbox knows, running or exited and not yet reaped. */
  list(): Promise<ProcessInfo[]>;
  /** Attaches to a background process started earlier, by this client or another. */
  connect(pid: number, options?: CommandConnectOptions): Promise<CommandHandle>;
  /** Sends `signal` (default SIGKILL) to the process's whole group; false if it had exited. */
  kill(pid: number, signal?: ProcessSignal): Promise<boolean>;
  sendStdin(pid: number, data: string | Uint8Array): Promise<void>;
  closeStdin(pid: number): Promise<void>;
}

export type ProcessSignal =
  "SIGTERM" | "SIGKILL" | "SIGINT" | "SIGHUP" | "SIGQUIT" | "SIGUSR1" | "SIGUSR2";

export interface ProcessInfo {
  pid: number;
  command: string;
  cwd: string;
  tag?: string;
  /** A terminal (`pty.create`) rather than a command. */
  pty: boolean;
  startedAt: Date;
  /** Set once the process has exited (it stays listed until its output is reaped). */
  exitCode?: number;
}

export interface CommandConnectOptions {
  /**
   * Replay output from this byte offset of the process's combined output (default: 0), or
   * `"end"`: no replay, only the output written from the moment of attaching.
   */
  offset?: number | "end";
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  signal?: AbortSignal;
}

/** A background process. Output callbacks fire until it exits or `disconnect()`. */
export interface CommandHandle {
  readonly pid: number;
  /** Output received by this handle so far. */
  readonly stdout: string;
  readonly stderr: string;
  /**
   * Bytes of output the sandbox no longer kept when this handle attached (its buffer per
   * process is bounded); 0 when the replay was complete.
   */
  readonly droppedBytes: number;
  /** Resolves when the process exits, with everything this handle received. */
  wait(): Promise<SandboxExecutionResult>;
  kill(signal?: ProcessSignal): Promise<boolean>;
  sendStdin(data: string | Uint8Array): Promise<void>;
  closeStdin(): Promise<void>;
  /** Stops receiving output; the process keeps running and can be `connect`ed to again. */
  disconnect(): Promise<void>;
}

export interface SandboxPty {
  create(options: PtyCreateOptions): Promise<PtyHandle>;
  connect(pid: number, options: PtyConnectOptions): Promise<PtyHandle>;
  sendInput(pid: number, data: string | Uint8Array): Promise<void>;
  resize(pid: number, size: PtySize): Promise<void>;
  kill(pid: number): Promise<boolean>;
}

export interface PtyConnectOptions {
  onData: (data: Uint8Array) => void;
  /**
   * Whether the new client first gets the terminal's recent output the target keeps (default
   * true); false: only what the terminal writes from the moment of attaching.
   */
  replay?: boolean;
  signal?: AbortSignal;
}

export interface PtySize {
  cols: number;
  rows: number;
}

export interface PtyCreateOptions extends PtySize {
  onData: (data: Uint8Array) => void;
  /** Default: the sandbox user's login shell. */
  command?: string;
  cwd?: string;
  envs?: Record<string, string>;
  signal?: AbortSignal;
}

export interface PtyHandle {
  readonly pid: number;
  sendInput(data: string | Uint8Array): Promise<void>;
  resize(size: PtySize): Promise<void>;
  kill(): Promise<boolean>;
  /** Resolves with the exit code when the terminal's process ends. */
  wait(): Promise<{ exitCode: number }>;
  /** Stops receiving output; the terminal keeps running. */
  disconnect(): Promise<void>;
}

export interface SandboxFilesystem {
  read(path: string, options?: TransferOptions): Promise<string>;
  readBytes(path: string, options?: TransferOptions): Promise<Uint8Array>;
  write(path: string, content: string | Uint8Array, options?: TransferOptions): Promise<void>;
  /** Entries of a directory; with `depth` > 1, of its subdirectories too (default 1). */
  list(path: string, options?: { depth?: number }): Promise<SandboxFileInfo[]>;
  exists(path: string): Promise<boolean>;
  /** Creates the directory and any missing parents; succeeds if it already exists. */
  mkdir(path: string): Promise<void>;
  /** Removes a file or a directory with everything in it. */
  remove(path: string): Promise<void>;
  /** Moves a file or directory; replaces a file at `to`, as rename(2) does. */
  rename(from: string, to: string): Promise<void>;
  stat(path: string): Promise<SandboxFileInfo>;
  /** Appends to a file, creating it when missing. */
  append(path: string, content: string | Uint8Array, options?: TransferOptions): Promise<void>;
  /** Absolute paths matching a glob (`**` crosses directories), relative to `cwd`. */
  glob(pattern: string, options?: { cwd?: string }): Promise<string[]>;
  /** Lines matching a regular expression (or, with `literal`, a plain string). */
  grep(pattern: string, options?: GrepOptions): Promise<GrepMatch[]>;
  /** Calls `onEvent` for each change under `path` until the handle is stopped. */
  watch(
    path: string,
    onEvent: (event: FilesystemEvent) => void,
    options?: { recursive?: boolean; signal?: AbortSignal },
  ): Promise<WatchHandle>;
  /** The file's bytes as they are read: memory stays flat for any size. */
  readStream(path: string, options?: TransferOptions): Promise<ReadableStream<Uint8Array>>;
  /** Writes what `data` yields, as it yields it; the file appears whole or not at all. */
  writeStream(
    path: string,
    data: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
    options?: TransferOptions,
  ): Promise<void>;
}

export interface TransferOptions {
  signal?: AbortSignal;
}

export interface GrepOptions {
  /** Directory (searched recursively) or file; default the working directory. */
  path?: string;
  /** Only files whose name matches this glob. */
  glob?: string;
  ignoreCase?: boolean;
  literal?: boolean;
  /** Stop after this many matches (default 1000). */
  maxMatches?: number;
}

export interface GrepMatch {
  path: string;
  /** 1-based. */
  line: number;
  text: string;
}

export interface FilesystemEvent {
  type: "create" | "write" | "remove" | "rename" | "chmod";
  /** Absolute path inside the sandbox. */
  path: string;
}

export interface WatchHandle {
  stop(): Promise<void>;
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
  /**
   * How long the sandbox lives: `ttlMs` from creation at most, and it is paused (or stopped,
   * where the backend cannot pause) after `idleTimeoutMs` with no activity.
   */
  lifetime?: { ttlMs?: number; idleTimeoutMs?: number };
  resources?: SandboxResources;
  /** The image (Docker, local: none), pool (Kubernetes), template (E2B) or snapshot (Daytona). */
  template?: string;
  /** Labels to find the sandbox by with `provider.list({labels})` (E2B: metadata). */
  labels?: Record<string, string>;
  network?: SandboxNetwork;
  mounts?: SandboxMount[];
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
  /** Aborting kills the command with its process group (foreground runs only). */
  signal?: AbortSignal;
  /** With `background`: a label shown by `commands.list()`. */
  tag?: string;
}

export interface CodeExecutionOptions {
  envs?: Record<string, string>;
  timeoutMs?: number;
  cwd?: string;
  /** Run in this persistent context instead of a fresh interpreter (its language must match). */
  context?: CodeContext | string;
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  /** Called with each rich result (display calls, then the last expression's value). */
  onResult?: (result: CodeResult) => void;
  /** Aborting interrupts the cell; a context stays usable. */
  signal?: AbortSignal;
}

export interface CodeContextOptions {
  /** Default: the sandbox's language. */
  language?: SandboxLanguage;
  /** Default: the sandbox's working directory. */
  cwd?: string;
}

export interface CodeContext {
  id: string;
  language: SandboxLanguage;
  cwd: string;
}

/**
 * One output of a cell in its formats (as a notebook shows it): the last expression's value
 * (`isMainResult`) or a display call (a matplotlib figure, `display(df)`).
 */
export interface CodeResult {
  isMainResult: boolean;
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  /** Base64. */
  png?: string;
  /** Base64. */
  jpeg?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
  /** A table (a pandas DataFrame): column names and rows of values. */
  table?: { columns: string[]; rows: unknown[][] };
  /** Formats none of the fields above names, by MIME type. */
  extra?: Record<string, unknown>;
}

export interface CodeExecutionResult {
  success: boolean;
  /** Parsed JSON output when available. */
  output?: unknown;
  stdout: string;
  stderr: string;
  durationMs: number;
  /** Rich results in the order they were produced; empty when there were none. */
  results: CodeResult[];
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
  /** Permission bits (0o7777), where the provider reports them. */
  mode?: number;
}
