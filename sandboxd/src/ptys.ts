/**
 * Terminals: a process on a pseudo-terminal (node-pty), with the sandbox's environment, working
 * directory and user, that clients attach to over a WebSocket (pty-routes.ts). A terminal
 * outlives its clients: its recent output is kept in a bounded ring, so a client that attaches
 * later (another SDK instance, after a reconnect) first gets the bytes that drew the screen.
 *
 * Bounds: at most `max` running terminals (past that, CAPACITY_EXCEEDED); a terminal nobody is
 * attached to and nobody typed into for `idleMs` is killed; an exited one is forgotten after
 * `keepExitedMs`. Killing a terminal kills its whole session: an interactive shell puts every
 * job in a process group of its own, so the shell's group alone would leave `top` running.
 */
import type { IPty } from "node-pty";
import type { Executor } from "./executor.ts";
import { killSessions, trackSession } from "./process.ts";
import { SandboxdError, type PtyInfo } from "./wire.ts";
import type { PtyCreateRequest, PtySize } from "./protocol.ts";

/**
 * node-pty, loaded on the first terminal: it is a native module, always in the sandbox image,
 * but an optional peer dependency of the SDK (whose local provider runs sandboxd on the host),
 * so a host without it still runs commands and code and only lacks terminals.
 */
let nodePty: Promise<typeof import("node-pty")> | null = null;
function loadNodePty(): Promise<typeof import("node-pty")> {
  nodePty ??= import("node-pty").catch((err: unknown) => {
    nodePty = null;
    throw new SandboxdError(
      "NOT_SUPPORTED",
      `terminals need the node-pty package, which is not installed here: npm install node-pty`,
      { cause: err },
    );
  });
  return nodePty;
}

export interface TerminalsOptions {
  executor: Executor;
  /** Running terminals at once. */
  max: number;
  /** A terminal without clients and without input this long is killed. */
  idleMs: number;
  /** An exited terminal stays listed (and its exit status readable) this long. Default 5 min. */
  keepExitedMs?: number;
  /** Recent output kept per terminal for clients that attach later. Default 256 KiB. */
  ringBytes?: number;
}

/**
 * The login shell would be `bash -l`, but Debian's /etc/profile resets PATH for every login
 * shell, which would hide Sandpit's interpreters and the image's Node: an interactive bash
 * (a terminal makes it one) keeps the sandbox's environment as commands get it.
 */
const SHELL = ["/bin/bash"];
/** Output a slow client may have queued before the terminal stops reading (and its program blocks). */
const HIGH_WATER = 1024 * 1024;
const LOW_WATER = 256 * 1024;
/** How long kill() waits for the terminal's exit to be seen. */
const KILL_WAIT_MS = 3_000;

/** A client attached to a terminal (one WebSocket). */
export interface TerminalClient {
  /** Terminal output; `done` once it has been written out (flow control). */
  send(data: Buffer, done: () => void): void;
  /** The terminal's program exited; sent once, after the last output. */
  exit(exitCode: number): void;
  /** The terminal is going away without an exit to report (sandboxd stopping). */
  close(): void;
}

/** Bytes kept up to a cap, oldest dropped first. */
class Ring {
  private chunks: Buffer[] = [];
  private size = 0;
  private readonly cap: number;
  constructor(cap: number) {
    this.cap = cap;
  }
  push(b: Buffer): void {
    this.chunks.push(b);
    this.size += b.length;
    while (this.size > this.cap) {
      const first = this.chunks[0]!;
      const over = this.size - this.cap;
      if (first.length <= over) {
        this.chunks.shift();
        this.size -= first.length;
      } else {
        this.chunks[0] = first.subarray(over);
        this.size -= over;
      }
    }
  }
  contents(): Buffer {
    const all = Buffer.concat(this.chunks);
    this.chunks = [all];
    return all;
  }
}

export class Terminal {
  readonly pid: number;
  readonly command: string;
  readonly cwd: string;
  readonly startedAt = Date.now();
  exitCode: number | undefined;
  /** When it exited, or when a client or input last touched it. */
  lastUsed = Date.now();
  private readonly pty: IPty;
  private readonly ring: Ring;
  /** Each attached client and its output not yet written out. */
  private readonly clients = new Map<TerminalClient, number>();
  private paused = false;
  private readonly exited: Promise<number>;

  constructor(pty: IPty, command: string, cwd: string, ringBytes: number) {
    this.pty = pty;
    this.pid = pty.pid;
    this.command = command;
    this.cwd = cwd;
    this.ring = new Ring(ringBytes);
    // encoding: null makes node-pty hand out Buffers, whatever its typings say.
    pty.onData((chunk) => this.output(chunk as unknown as Buffer));
    this.exited = new Promise((resolve) => {
      pty.onExit(({ exitCode, signal }) => {
        // A shell reports a command killed by a signal as 128 + its number; so does a terminal.
        this.exitCode = signal ? 128 + signal : exitCode;
        this.lastUsed = Date.now();
        for (const client of this.clients.keys()) client.exit(this.exitCode);
        this.clients.clear();
        resolve(this.exitCode);
      });
    });
  }

  get running(): boolean {
    return this.exitCode === undefined;
  }

  get attached(): number {
    return this.clients.size;
  }

  info(): PtyInfo {
    return {
      pid: this.pid,
      command: this.command,
      cwd: this.cwd,
      pty: true,
      startedAtMs: this.startedAt,
      ...(this.exitCode === undefined ? {} : { exitCode: this.exitCode }),
    };
  }

  /**
   * Attaches a client: it gets the kept output at once (unless `replay` is false: new output
   * only), then everything new; a terminal that already exited reports its exit right after.
   * Returns the detach function.
   */
  attach(client: TerminalClient, replay = true): () => void {
    this.lastUsed = Date.now();
    const kept = replay ? this.ring.contents() : Buffer.alloc(0);
    if (this.exitCode !== undefined) {
      if (kept.length) client.send(kept, () => undefined);
      client.exit(this.exitCode);
      return () => undefined;
    }
    this.clients.set(client, 0);
    if (kept.length) this.deliver(client, kept);
    return () => {
      this.lastUsed = Date.now();
      this.clients.delete(client);
      this.maybeResume();
    };
  }

  /** Input, as typed. Ignored once the program has exited (its exit status is on its way). */
  write(data: Buffer | string): void {
    this.lastUsed = Date.now();
    if (this.running) this.pty.write(data);
  }

  resize(size: PtySize): void {
    this.lastUsed = Date.now();
    if (!this.running) return;
    try {
      this.pty.resize(size.cols, size.rows);
    } catch {
      // the terminal closed in between: its exit is on its way
    }
  }

  /** Kills the whole session; false if the program had already exited. */
  async kill(): Promise<boolean> {
    if (!this.running) return false;
    await killSessions(new Set([this.pid]));
    await Promise.race([this.exited, new Promise((r) => setTimeout(r, KILL_WAIT_MS).unref())]);
    return true;
  }

  /** sandboxd is stopping: clients are told, the session is killed. */
  async close(): Promise<void> {
    for (const client of this.clients.keys()) client.close();
    this.clients.clear();
    await this.kill();
  }

  private output(chunk: Buffer): void {
    this.ring.push(chunk);
    for (const client of this.clients.keys()) this.deliver(client, chunk);
  }

  /** Sends to one client; stops reading the terminal while any client lags too far behind. */
  private deliver(client: TerminalClient, chunk: Buffer): void {
    const queued = (this.clients.get(client) ?? 0) + chunk.length;
    this.clients.set(client, queued);
    client.send(chunk, () => {
      const left = this.clients.get(client);
      if (left === undefined) return;
      this.clients.set(client, left - chunk.length);
      this.maybeResume();
    });
    if (queued > HIGH_WATER && !this.paused) {
      this.paused = true;
      this.pty.pause();
    }
  }

  private maybeResume(): void {
    if (!this.paused) return;
    for (const queued of this.clients.values()) if (queued > LOW_WATER) return;
    this.paused = false;
    this.pty.resume();
  }
}

export class Terminals {
  private readonly opts: Required<TerminalsOptions>;
  private readonly all = new Map<number, Terminal>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(opts: TerminalsOptions) {
    this.opts = { keepExitedMs: 5 * 60_000, ringBytes: 256 * 1024, ...opts };
    const every = Math.min(
      Math.max(Math.min(this.opts.idleMs, this.opts.keepExitedMs) / 4, 1_000),
      60_000,
    );
    this.sweeper = setInterval(() => void this.sweep(), every);
    this.sweeper.unref();
  }

  async create(req: PtyCreateRequest): Promise<Terminal> {
    const { executor } = this.opts;
    const { spawn: spawnPty } = await loadNodePty();
    const cwd = await executor.existingDir(req.cwd);
    // Counted after the await, so concurrent creates cannot both take the last place.
    const terminals = [...this.all.values()];
    if (terminals.filter((t) => t.running).length >= this.opts.max) {
      throw new SandboxdError(
        "CAPACITY_EXCEEDED",
        `at most ${this.opts.max} terminals may run at once in a sandbox: kill one first`,
      );
    }
    // Exited terminals are kept for their status and output, but no more of them than `max`.
    const exited = terminals.filter((t) => !t.running).sort((a, b) => a.lastUsed - b.lastUsed);
    for (const t of exited.slice(0, Math.max(0, exited.length - this.opts.max + 1)))
      this.all.delete(t.pid);
    const env = executor.processEnv({ TERM: "xterm-256color", ...req.env });
    const [file, ...args] = req.command ? ["/bin/sh", "-c", executor.localise(req.command)] : SHELL;
    let pty: IPty;
    try {
      pty = spawnPty(file!, args, {
        name: env.TERM!,
        cols: req.cols,
        rows: req.rows,
        cwd: executor.inSandbox(cwd),
        env,
        encoding: null,
      });
    } catch (err) {
      throw new SandboxdError(
        "EXECUTION_FAILED",
        `could not start a terminal: ${(err as Error).message}`,
        { cause: err },
      );
    }
    // The terminal's program leads its own session (node-pty's forkpty): sandboxd's exit ends it.
    trackSession(pty.pid);
    const terminal = new Terminal(
      pty,
      req.command ?? SHELL.join(" "),
      cwd.virtual,
      this.opts.ringBytes,
    );
    this.all.set(terminal.pid, terminal);
    return terminal;
  }

  /** The terminal with `pid`, running or exited and not yet forgotten. */
  /** Whether a terminal is open (for the idle measure: a person may be reading it). */
  get active(): boolean {
    for (const t of this.all.values()) if (t.running) return true;
    return false;
  }

  get(pid: number): Terminal {
    const terminal = this.all.get(pid);
    if (!terminal) throw new SandboxdError("NOT_FOUND", `no terminal with pid ${pid}`);
    return terminal;
  }

  list(): PtyInfo[] {
    return [...this.all.values()].map((t) => t.info());
  }

  async shutdown(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all([...this.all.values()].map((t) => t.close()));
    this.all.clear();
  }

  /** Kills terminals left idle and forgets exited ones past their keep time. */
  async sweep(now = Date.now()): Promise<void> {
    for (const t of [...this.all.values()]) {
      if (t.attached > 0) continue;
      if (!t.running && now - t.lastUsed >= this.opts.keepExitedMs) this.all.delete(t.pid);
      else if (t.running && now - t.lastUsed >= this.opts.idleMs) await t.kill();
    }
  }
}
