/**
 * Terminals on sandboxd-backed providers (local, docker, kubernetes): `POST /v1/pty` creates one,
 * and a handle is a WebSocket on `/v1/pty/<pid>/connect` (docs/terminals.md): the terminal's
 * bytes both ways as binary frames, resize and the exit status as JSON text frames. The socket
 * goes wherever the provider's SandboxdClient goes (a unix socket, a container port, the
 * provisioner's proxy), with the same credentials.
 */
import {
  PTY_MAX_SIZE,
  type PtyInfo,
  type PtyServerMessage,
  ptyDimensionRule,
} from "@sandpit/sandboxd/wire";
import type { WebSocket } from "undici";
import { SandboxError } from "../errors.ts";
import type { SandboxdClient } from "../sandboxd-client.ts";
import type { PtyConnectOptions, PtyCreateOptions, PtyHandle, SandboxPty } from "../types.ts";

type WithClient = <T>(op: (c: SandboxdClient) => Promise<T>) => Promise<T>;

export class SandboxdPty implements SandboxPty {
  private readonly with: WithClient;
  private readonly defaultCwd: string | undefined;

  constructor(withClient: WithClient, defaultCwd: string | undefined) {
    this.with = withClient;
    this.defaultCwd = defaultCwd;
  }

  async create(o: PtyCreateOptions): Promise<PtyHandle> {
    checkOnData(o?.onData);
    const size = checkSize(o);
    checkNotAborted(o.signal);
    const cwd = o.cwd ?? this.defaultCwd;
    const { pid } = await this.with((c) =>
      c.call<{ pid: number }>("POST", "/v1/pty", {
        ...size,
        ...(o.command === undefined ? {} : { command: o.command }),
        ...(cwd === undefined ? {} : { cwd }),
        ...(o.envs === undefined ? {} : { env: o.envs }),
      }),
    );
    let handle: PtyHandle;
    try {
      handle = await this.open(pid, o.onData, true);
    } catch (err) {
      await this.kill(pid).catch(() => undefined);
      throw err;
    }
    // Aborting a terminal's creation ends the terminal, whenever it comes.
    if (o.signal) {
      const kill = () => void handle.kill().catch(() => undefined);
      if (o.signal.aborted) kill();
      else o.signal.addEventListener("abort", kill, { once: true });
      void handle
        .wait()
        .catch(() => undefined)
        .finally(() => o.signal?.removeEventListener("abort", kill));
    }
    return handle;
  }

  async connect(pid: number, o: PtyConnectOptions): Promise<PtyHandle> {
    checkPid(pid);
    checkOnData(o?.onData);
    if (o.replay !== undefined && typeof o.replay !== "boolean")
      throw new SandboxError("replay must be a boolean", "INVALID_ARGUMENT");
    checkNotAborted(o.signal);
    // A WebSocket refused before it opens tells nothing; asking first gives NOT_FOUND its code.
    await this.info(pid);
    const handle = await this.open(pid, o.onData, o.replay ?? true);
    o.signal?.addEventListener("abort", () => void handle.disconnect(), { once: true });
    return handle;
  }

  async sendInput(pid: number, data: string | Uint8Array): Promise<void> {
    checkPid(pid);
    await this.with((c) => c.call("POST", `/v1/pty/${pid}/input`, bytes(data)));
  }

  async resize(pid: number, size: { cols: number; rows: number }): Promise<void> {
    checkPid(pid);
    await this.with((c) => c.call("POST", `/v1/pty/${pid}/resize`, checkSize(size)));
  }

  async kill(pid: number): Promise<boolean> {
    checkPid(pid);
    const r = await this.with((c) => c.call<{ killed: boolean }>("DELETE", `/v1/pty/${pid}`));
    return r.killed;
  }

  private info(pid: number): Promise<PtyInfo> {
    return this.with((c) => c.call<PtyInfo>("GET", `/v1/pty/${pid}`));
  }

  private async open(
    pid: number,
    onData: (data: Uint8Array) => void,
    replay: boolean,
  ): Promise<PtyHandle> {
    const query = replay ? "" : "?replay=false";
    const ws = await this.with((c) => c.webSocket(`/v1/pty/${pid}/connect${query}`));
    return TerminalSocket.open(pid, ws, onData, this);
  }
}

/** One attached client: a PtyHandle over the terminal's WebSocket. */
class TerminalSocket implements PtyHandle {
  readonly pid: number;
  private readonly ws: WebSocket;
  private readonly pty: SandboxdPty;
  private exitCode: number | undefined;
  private readonly exited: Promise<{ exitCode: number }>;
  private readonly closed: Promise<void>;

  static async open(
    pid: number,
    ws: WebSocket,
    onData: (data: Uint8Array) => void,
    pty: SandboxdPty,
  ): Promise<TerminalSocket> {
    const socket = new TerminalSocket(pid, ws, onData, pty);
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener("open", () => resolve(), { once: true });
      ws.addEventListener(
        "close",
        (e) => reject(closeError(pid, e.code, e.reason, "opening the terminal's WebSocket")),
        { once: true },
      );
    });
    return socket;
  }

  private constructor(
    pid: number,
    ws: WebSocket,
    onData: (data: Uint8Array) => void,
    pty: SandboxdPty,
  ) {
    this.pid = pid;
    this.ws = ws;
    this.pty = pty;
    ws.binaryType = "arraybuffer";
    let settle: { resolve: (v: { exitCode: number }) => void; reject: (e: Error) => void };
    this.exited = new Promise((resolve, reject) => (settle = { resolve, reject }));
    // wait() is optional: a terminal that ends unwaited-for is no unhandled rejection.
    this.exited.catch(() => undefined);
    ws.addEventListener("message", (e) => {
      if (typeof e.data !== "string") return onData(new Uint8Array(e.data as ArrayBuffer));
      const message = JSON.parse(e.data) as PtyServerMessage;
      if (message.type === "exit") {
        this.exitCode = message.exitCode;
        settle.resolve({ exitCode: message.exitCode });
      }
    });
    this.closed = new Promise((resolve) =>
      ws.addEventListener(
        "close",
        (e) => {
          settle.reject(closeError(pid, e.code, e.reason, "the terminal's connection"));
          resolve();
        },
        { once: true },
      ),
    );
  }

  // async: a refusal is a rejected promise, as everywhere in the contract, never a throw.
  async sendInput(data: string | Uint8Array): Promise<void> {
    this.usable();
    this.ws.send(bytes(data));
  }

  async resize(size: { cols: number; rows: number }): Promise<void> {
    const checked = checkSize(size);
    this.usable();
    this.ws.send(JSON.stringify({ type: "resize", ...checked }));
  }

  kill(): Promise<boolean> {
    return this.pty.kill(this.pid);
  }

  wait(): Promise<{ exitCode: number }> {
    return this.exited;
  }

  async disconnect(): Promise<void> {
    if (this.ws.readyState === this.ws.CLOSED) return;
    this.ws.close(1000);
    await this.closed;
  }

  private usable(): void {
    if (this.exitCode !== undefined)
      throw new SandboxError(`terminal ${this.pid} has exited`, "CONFLICT");
    if (this.ws.readyState !== this.ws.OPEN)
      throw new SandboxError(
        `terminal ${this.pid}: this handle is disconnected (pty.connect attaches again)`,
        "CONNECTION_FAILED",
      );
  }
}

/** What a close without an exit status means to the caller. */
function closeError(pid: number, code: number, reason: string, what: string): SandboxError {
  if (code === 4404) return new SandboxError(reason || `no terminal with pid ${pid}`, "NOT_FOUND");
  if (code === 1008) return new SandboxError(`${what}: ${reason}`, "INVALID_ARGUMENT");
  if (code === 1000)
    return new SandboxError(
      `terminal ${pid}: this handle was disconnected before the terminal exited`,
      "CONNECTION_FAILED",
    );
  return new SandboxError(
    `${what} to terminal ${pid} closed (${code}${reason ? `: ${reason}` : ""})`,
    "CONNECTION_FAILED",
  );
}

/** sandboxd's rule for a terminal's size, checked before anything is sent. */
function checkSize(o: { cols: number; rows: number }): { cols: number; rows: number } {
  for (const name of ["cols", "rows"] as const) {
    const v: unknown = o?.[name];
    if (!Number.isInteger(v) || (v as number) < 1 || (v as number) > PTY_MAX_SIZE)
      throw new SandboxError(ptyDimensionRule(name), "INVALID_ARGUMENT");
  }
  return { cols: o.cols, rows: o.rows };
}

function checkPid(pid: number): void {
  if (!Number.isSafeInteger(pid) || pid < 1)
    throw new SandboxError("pid must be a positive integer", "INVALID_ARGUMENT");
}

function checkOnData(onData: unknown): void {
  if (typeof onData !== "function")
    throw new SandboxError("onData must be a function", "INVALID_ARGUMENT");
}

function checkNotAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted)
    throw new SandboxError("the terminal was not started: its signal was aborted", "CONFLICT");
}

function bytes(data: string | Uint8Array): Uint8Array {
  if (typeof data === "string") return new TextEncoder().encode(data);
  if (data instanceof Uint8Array) return data;
  throw new SandboxError("data must be a string or a Uint8Array", "INVALID_ARGUMENT");
}
