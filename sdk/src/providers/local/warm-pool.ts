/**
 * The local provider's warm pool: blank sandboxds started ahead of demand, so a create is a claim
 * (a link and two small files, and a `/v1/init` on an open connection when the sandbox has an
 * environment) rather than a process start (~250 ms of Node start-up).
 * The same blank-then-init adoption as the Docker provider's warm containers and the Kubernetes
 * warm pods: a warm sandboxd serves an empty data directory with a token only this process knows
 * (drawn here, passed on its stdin); a claim sends the sandbox's environment, if it has one, and
 * the token becomes the sandbox's (written to its run file, 0600). Unlike a warm pod's, the token
 * was never anywhere another party could read it, so a claim has nothing to revoke.
 *
 * A sandboxd's root is fixed when it starts, so a warm one serves `<baseDir>/data/<key>/user-data`
 * and a claim links the thread's `user-data` to it; the data stays there for the sandbox's life.
 *
 * Ownership: the pool belongs to the provider object that filled it (claims are a synchronous
 * `shift()`, so two creates never get the same process). Unclaimed processes must not outlive
 * this process, however it ends: a tiny `sh` watchdog, in its own session and deaf to the
 * terminal's signals, holds the read end of a pipe only this process writes to. It is told
 * which processes are unclaimed; when the pipe closes (this process exited, or was SIGKILLed) it
 * kills those (their PID namespace too, under bubblewrap) and removes their directories. Claimed
 * processes are detached sandboxes like any other (./detached.ts) and are not the watchdog's.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import * as fs from "node:fs/promises";
import { join } from "node:path";
import type { Socket } from "node:net";
import type { Logger } from "../../logger.ts";
import { SandboxdClient } from "../../sandboxd-client.ts";
import { isAlive, stopDetached, type RunRecord } from "./detached.ts";

/** What the pool needs to start one blank sandboxd: the provider's spawn, with its shape. */
export interface WarmSpawn {
  (shape: {
    key: string;
    dataDir: string;
    runDir: string;
    /** Called with the pid as soon as the process exists, before it is ready. */
    onSpawn: (pid: number) => void;
  }): Promise<{ run: RunRecord; child: ChildProcess }>;
}

/** One blank sandboxd, ready to be claimed. */
export interface WarmProcess {
  readonly key: string;
  /** The directory sandboxd serves (its root): `<baseDir>/data/<key>/user-data`. */
  readonly dataDir: string;
  /** Its run record, with its token (the claimer's from the claim on). */
  readonly run: RunRecord;
  /** Warmed up with a few commands and an init; the claimer's client, its connection open. */
  readonly client: SandboxdClient;
  readonly child: ChildProcess;
}

/** A claim is not refilled at once: the refill's process start would slow the claimer's first command. */
const REFILL_DELAY_MS = 100;
/** Commands a warm sandboxd runs before joining the pool, so the claimer's first one is JIT-warm. */
const WARM_UP_COMMANDS = 3;

/**
 * The watchdog: `add <pid> <key>` / `del <pid>` lines on stdin; at end of input, every process
 * still added is SIGKILLed (its children first: the namespace init under bubblewrap, which takes
 * the whole PID namespace with it) and its data and socket directories are removed.
 */
const WATCHDOG = `trap '' HUP INT TERM QUIT PIPE
data=$1 run=$2 live=
while read -r op pid key; do
  case $op in
    add) live="$live $pid:$key" ;;
    del) keep=; for e in $live; do [ "\${e%%:*}" = "$pid" ] || keep="$keep $e"; done; live=$keep ;;
  esac
done
for e in $live; do
  pid=\${e%%:*} key=\${e#*:}
  for c in $(cat /proc/$pid/task/$pid/children 2>/dev/null); do kill -KILL "$c" 2>/dev/null; done
  kill -KILL -- "-$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null
  rm -rf "$data/$key" "$run/$key"
done`;

export class WarmPool {
  readonly size: number;
  private readonly ready: WarmProcess[] = [];
  private filling: Promise<void> | null = null;
  private refill: NodeJS.Timeout | null = null;
  private watchdog: ChildProcess | null = null;
  private closed = false;
  readonly dataRoot: string;
  private readonly runRoot: string;
  private readonly spawnOne: WarmSpawn;
  private readonly logger: Logger | undefined;

  /** `dataRoot`: `<baseDir>/data`; `runRoot`: where socket directories live (`<runRoot>/<key>`). */
  constructor(o: {
    size: number;
    dataRoot: string;
    runRoot: string;
    spawn: WarmSpawn;
    logger?: Logger | undefined;
  }) {
    this.size = o.size;
    this.dataRoot = o.dataRoot;
    this.runRoot = o.runRoot;
    this.spawnOne = o.spawn;
    this.logger = o.logger;
  }

  /** Where a warm process's directories go: its key names both. */
  dirsOf(key: string): { dataDir: string; runDir: string } {
    return { dataDir: join(this.dataRoot, key, "user-data"), runDir: join(this.runRoot, key) };
  }

  /** The unclaimed processes (diagnostics and tests). */
  get processes(): readonly WarmProcess[] {
    return this.ready;
  }

  /**
   * Takes a ready process, or undefined (then the create starts one cold). Synchronous, so no
   * two creates can take the same one; the refill is scheduled, never awaited.
   */
  take(): WarmProcess | undefined {
    const p = this.ready.shift();
    if (p) {
      p.child.removeAllListeners("exit");
      this.tell(`del ${p.run.pid}`);
    }
    this.scheduleFill();
    return p;
  }

  /** Tops the pool up to `size` (one process at a time: each start is CPU-bound). */
  fill(): Promise<void> {
    if (this.size === 0 || this.closed) return Promise.resolve();
    this.filling ??= (async () => {
      while (!this.closed && this.ready.length < this.size) await this.startOne();
    })()
      .catch((err: unknown) => this.logger?.warn({ err }, "could not fill the local warm pool"))
      .finally(() => (this.filling = null));
    return this.filling;
  }

  /** Fills the pool shortly, on a timer that does not keep this process alive. */
  scheduleFill(): void {
    if (this.size === 0 || this.closed || this.refill) return;
    this.refill = setTimeout(() => {
      this.refill = null;
      void this.fill();
    }, REFILL_DELAY_MS);
    this.refill.unref();
  }

  private async startOne(): Promise<void> {
    const key = randomBytes(8).toString("hex");
    const { dataDir, runDir } = this.dirsOf(key);
    await fs.mkdir(join(dataDir, ".sandpit", "home"), { recursive: true });
    const watchdog = this.ensureWatchdog();
    let pid: number | undefined;
    let started: { run: RunRecord; child: ChildProcess };
    try {
      // The watchdog hears of it before it is even ready: this process may end at any moment.
      started = await this.spawnOne({
        key,
        dataDir,
        runDir,
        onSpawn: (p) => this.tell(`add ${(pid = p)} ${key}`, watchdog),
      });
    } catch (err) {
      if (pid) this.tell(`del ${pid}`);
      await this.removeDirs(key);
      throw err;
    }
    const { run, child } = started;
    const p: WarmProcess = {
      key,
      dataDir,
      run,
      client: new SandboxdClient({
        baseUrl: "http://sandboxd",
        socketPath: run.socketPath,
        token: run.token,
      }),
      child,
    };
    try {
      for (let i = 0; i < WARM_UP_COMMANDS; i++) await p.client.runCommand({ command: "true" });
      // A claim's init runs warm too: one that sets the same token again changes nothing.
      await p.client.init({ token: run.token });
    } catch (err) {
      await this.discard(p);
      throw err;
    }
    if (this.closed) return this.discard(p);
    // A process that dies while waiting is dropped and replaced, never handed out.
    child.once("exit", () => {
      const i = this.ready.indexOf(p);
      if (i < 0) return;
      this.ready.splice(i, 1);
      this.logger?.warn({ pid: run.pid }, "a warm local sandboxd exited; replacing it");
      void this.discard(p).then(() => this.scheduleFill());
    });
    this.ready.push(p);
  }

  /** Stops an unclaimed (or failed-to-claim) process and removes its directories. */
  async discard(p: WarmProcess): Promise<void> {
    p.child.removeAllListeners("exit");
    await p.client.destroy().catch(() => undefined);
    await stopDetached(p.run).catch(() => undefined);
    this.tell(`del ${p.run.pid}`);
    await this.removeDirs(p.key);
  }

  /** True when `p` is still the process that was started (checked again at claim). */
  alive(p: WarmProcess): Promise<boolean> {
    return isAlive(p.run);
  }

  private async removeDirs(key: string): Promise<void> {
    const { runDir } = this.dirsOf(key);
    await fs.rm(join(this.dataRoot, key), { recursive: true, force: true });
    await fs.rm(runDir, { recursive: true, force: true });
  }

  private ensureWatchdog(): ChildProcess {
    if (this.watchdog) return this.watchdog;
    const w = spawn(
      "/bin/sh",
      ["-c", WATCHDOG, "sandpit-warm-watchdog", this.dataRoot, this.runRoot],
      {
        detached: true,
        stdio: ["pipe", "ignore", "ignore"],
      },
    );
    w.on("error", (err) => this.logger?.warn({ err }, "the warm pool's watchdog failed"));
    // Neither the watchdog nor the pipe to it keeps this process alive.
    w.unref();
    (w.stdin as Socket).unref();
    this.watchdog = w;
    return w;
  }

  private tell(line: string, watchdog = this.watchdog): void {
    watchdog?.stdin?.write(line + "\n");
  }

  /** Stops every unclaimed process and the watchdog; claims made earlier are not affected. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.refill) clearTimeout(this.refill);
    this.refill = null;
    await this.filling;
    await Promise.all(this.ready.splice(0).map((p) => this.discard(p)));
    this.watchdog?.stdin?.end();
    this.watchdog = null;
  }
}
