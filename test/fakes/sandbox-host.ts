/**
 * The real machinery behind the E2B and Daytona fakes: each fake sandbox is a temporary
 * directory mounted at /mnt/user-data (plus a home directory) inside bubblewrap, and every
 * command, code cell and package install the SDKs ask for runs as a real process there.
 *
 * Why bubblewrap without a PID namespace: a command like `(python3 -m http.server &)` must keep
 * its background server alive after the command returns (as in a real remote sandbox), which a
 * per-command PID namespace would kill. Each process is started in its own process group so a
 * timeout kills everything it started, and pause/kill stop every group the sandbox owns.
 * The host network is shared so servers inside are reachable on 127.0.0.1 (getHost).
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import * as fs from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, posix } from "node:path";
import { promisify } from "node:util";
import { spawn as ptySpawn, type IPty } from "node-pty";
import { discoverInterpreters, RUNNERS_DIR, scrubEnv, type Interpreters } from "@sandpit/sandboxd";
import { systemMounts } from "../../sdk/src/providers/local/bwrap.ts";

const run = promisify(execFile);

export const USER_DATA = "/mnt/user-data";
/** Where the fake image's helper binaries (python3, pip, node, npm links) are mounted. */
const SHIM_MOUNT = "/opt/fake-image/bin";
/** Where sandboxd's code runners are mounted (the fakes' kernels reuse them, read-only). */
export const RUNNERS_MOUNT = "/opt/fake-image/runners";

export async function bwrapUsable(): Promise<boolean> {
  try {
    await run("bwrap", ["--unshare-user", "--ro-bind", "/", "/", "--", "/bin/true"], {
      timeout: 10_000,
    });
    return true;
  } catch {
    return false;
  }
}

export interface SpawnOptions {
  /** Absolute path inside the sandbox. */
  cwd: string;
  env?: Record<string, string> | undefined;
  /** Pipes beyond stdio (fd 3, 4, ...), for kernels that talk over their own channels. */
  extraPipes?: number;
}

export type SandboxState = "running" | "paused" | "killed";

export class FakeSandbox {
  readonly id: string;
  readonly root: string;
  /** Mount point of the home directory inside (the image's user). */
  readonly home: string;
  /** Sandbox-wide environment (given at create time). */
  env: Record<string, string>;
  state: SandboxState = "running";
  /** Free-form data the service fakes keep with the sandbox (metadata, labels, ...). */
  readonly data: Record<string, unknown> = {};
  private readonly host: FakeSandboxHost;
  private readonly groups = new Set<number>();

  constructor(
    host: FakeSandboxHost,
    id: string,
    root: string,
    home: string,
    env: Record<string, string>,
  ) {
    this.host = host;
    this.id = id;
    this.root = root;
    this.home = home;
    this.env = env;
  }

  get dataDir(): string {
    return join(this.root, "user-data");
  }
  get homeDir(): string {
    return join(this.root, "home");
  }

  /**
   * Host path of an absolute sandbox path under /mnt/user-data or the home directory; null for
   * anything else (the fakes answer those with an error, as the services' path checks would).
   * Symlinks that leave the sandbox are refused after resolution.
   */
  async hostPath(p: string): Promise<string | null> {
    if (!p.startsWith("/")) p = posix.join(this.home, p);
    const v = posix.normalize(p).replace(/(.)\/+$/, "$1");
    let host: string | null = null;
    if (v === USER_DATA || v.startsWith(USER_DATA + "/"))
      host = this.dataDir + v.slice(USER_DATA.length);
    else if (v === this.home || v.startsWith(this.home + "/"))
      host = this.homeDir + v.slice(this.home.length);
    if (!host) return null;
    const real = await fs.realpath(host).catch(() => null);
    if (real && !(real === this.root || real.startsWith(this.root + "/"))) return null;
    return host;
  }

  /** The sandbox path of a host path (for listings). */
  virtualPath(host: string): string {
    if (host.startsWith(this.dataDir)) return USER_DATA + host.slice(this.dataDir.length);
    return this.home + host.slice(this.homeDir.length);
  }

  /** Starts argv inside the sandbox in its own process group; stdio is piped. */
  async spawn(argv: string[], o: SpawnOptions): Promise<ChildProcess> {
    if (this.state !== "running") throw new Error(`sandbox ${this.id} is ${this.state}`);
    const interp = await this.host.interpreters();
    const env: Record<string, string> = {
      ...this.host.baseEnv(this),
      ...this.env,
      ...o.env,
    };
    const args = [...(await this.host.bwrapArgs(this, interp)), "--chdir", o.cwd, "--", ...argv];
    const stdio = Array<"pipe">(3 + (o.extraPipes ?? 0)).fill("pipe");
    const child = spawn("bwrap", args, { env, stdio, detached: true });
    const pid = child.pid;
    if (pid !== undefined) {
      this.groups.add(pid);
      child.once("exit", () => {
        // The group may outlive its leader (background servers); keep it until pause/kill.
      });
    }
    child.stdin?.on("error", () => undefined);
    return child;
  }

  /**
   * Starts argv inside the sandbox on a new pseudo-terminal (node-pty makes it a session and
   * process-group leader, like `spawn`'s detached children); output arrives as Buffers.
   */
  async spawnPty(argv: string[], o: SpawnOptions & { cols: number; rows: number }): Promise<IPty> {
    if (this.state !== "running") throw new Error(`sandbox ${this.id} is ${this.state}`);
    const interp = await this.host.interpreters();
    const env: Record<string, string> = { ...this.host.baseEnv(this), ...this.env, ...o.env };
    const args = [...(await this.host.bwrapArgs(this, interp)), "--chdir", o.cwd, "--", ...argv];
    const term = ptySpawn("bwrap", args, {
      cols: o.cols,
      rows: o.rows,
      env,
      encoding: null,
      name: env.TERM ?? "xterm-256color",
    });
    this.groups.add(term.pid);
    return term;
  }

  /**
   * Kills everything one spawn started. Each spawn is its own session (detached = setsid), and
   * processes inside may have made new process groups (coreutils `timeout` does) or sessions
   * (`setsid`), so the session and every descendant of its members are swept through /proc as
   * well as the group being signalled.
   */
  killGroup(pid: number | undefined): void {
    if (pid === undefined) return;
    // Taken before any signal: a descendant whose parent dies is re-parented out of the tree.
    const tree = sessionTree(pid);
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      // already gone
    }
    for (const member of tree) {
      try {
        process.kill(member, "SIGKILL");
      } catch {
        // already gone
      }
    }
  }

  /** Stops everything the sandbox runs (pause keeps files; kill removes them too). */
  stopAll(): void {
    for (const pid of this.groups) this.killGroup(pid);
    this.groups.clear();
  }
}

export interface FakeSandboxHostOptions {
  /** The image user's home directory inside the sandbox, e.g. /home/user. */
  home: string;
  /** Extra environment of the fake image (what its Dockerfile would set). */
  imageEnv?: (sandbox: FakeSandbox) => Record<string, string>;
}

/** Both services' images let the user `pip install` into their own site-packages. */
export function userPipEnv(sbx: FakeSandbox): Record<string, string> {
  return { PIP_USER: "1", PYTHONUSERBASE: `${sbx.home}/.local`, PIP_BREAK_SYSTEM_PACKAGES: "1" };
}

export class FakeSandboxHost {
  private readonly sandboxes = new Map<string, FakeSandbox>();
  private readonly options: FakeSandboxHostOptions;
  private interp: Promise<Interpreters> | null = null;
  private shimDir: Promise<string> | null = null;
  private readonly base = join(
    tmpdir(),
    `sandpit-fake-${process.pid}-${randomBytes(4).toString("hex")}`,
  );

  constructor(options: FakeSandboxHostOptions) {
    this.options = options;
  }

  interpreters(): Promise<Interpreters> {
    this.interp ??= discoverInterpreters(process.env);
    return this.interp;
  }

  async create(id: string, env: Record<string, string>): Promise<FakeSandbox> {
    const root = join(this.base, id);
    for (const d of ["workspace", "uploads", "outputs"])
      await fs.mkdir(join(root, "user-data", d), { recursive: true });
    await fs.mkdir(join(root, "home"), { recursive: true });
    const sbx = new FakeSandbox(this, id, root, this.options.home, env);
    this.sandboxes.set(id, sbx);
    return sbx;
  }

  get(id: string): FakeSandbox | undefined {
    return this.sandboxes.get(id);
  }

  all(): FakeSandbox[] {
    return [...this.sandboxes.values()];
  }

  pause(sbx: FakeSandbox): void {
    sbx.stopAll();
    sbx.state = "paused";
  }

  async kill(sbx: FakeSandbox): Promise<void> {
    sbx.stopAll();
    sbx.state = "killed";
    this.sandboxes.delete(sbx.id);
    await fs.rm(sbx.root, { recursive: true, force: true });
  }

  async close(): Promise<void> {
    for (const sbx of this.sandboxes.values()) sbx.stopAll();
    this.sandboxes.clear();
    await fs.rm(this.base, { recursive: true, force: true });
  }

  /** The image's environment: PATH with the image binaries first, HOME, pip/npm settings. */
  baseEnv(sbx: FakeSandbox): Record<string, string> {
    return {
      ...scrubEnv(process.env),
      PATH: `${SHIM_MOUNT}:/usr/local/bin:/usr/bin:/bin`,
      HOME: sbx.home,
      USER: posix.basename(sbx.home),
      LANG: "C.UTF-8",
      PYTHONUNBUFFERED: "1",
      ...this.options.imageEnv?.(sbx),
    };
  }

  /** Links named python3, pip, node, npm to the host interpreters, mounted on PATH. */
  private async shims(interp: Interpreters): Promise<string> {
    this.shimDir ??= (async () => {
      const dir = join(this.base, "_image-bin");
      await fs.mkdir(dir, { recursive: true });
      await fs.symlink(interp.python, join(dir, "python3"));
      await fs.symlink(interp.python, join(dir, "python"));
      await fs.symlink(interp.node, join(dir, "node"));
      await fs.writeFile(join(dir, "pip"), `#!/bin/sh\nexec ${interp.python} -m pip "$@"\n`, {
        mode: 0o755,
      });
      await fs.writeFile(join(dir, "pip3"), `#!/bin/sh\nexec ${interp.python} -m pip "$@"\n`, {
        mode: 0o755,
      });
      if (interp.npmCli) {
        await fs.writeFile(
          join(dir, "npm"),
          `#!/bin/sh\nexec ${interp.node} ${interp.npmCli} "$@"\n`,
          { mode: 0o755 },
        );
        const npx = join(dirname(interp.npmCli), "npx-cli.js");
        if (existsSync(npx))
          await fs.writeFile(join(dir, "npx"), `#!/bin/sh\nexec ${interp.node} ${npx} "$@"\n`, {
            mode: 0o755,
          });
      }
      return dir;
    })();
    return this.shimDir;
  }

  async bwrapArgs(sbx: FakeSandbox, interp: Interpreters): Promise<string[]> {
    const shim = await this.shims(interp);
    const args = [
      "--unshare-user",
      "--unshare-ipc",
      "--unshare-uts",
      "--unshare-cgroup-try",
      "--die-with-parent",
    ];
    const readOnly = [dirname(dirname(interp.node)), interp.pythonPrefix];
    if (interp.npmCli) readOnly.push(dirname(dirname(interp.npmCli)));
    args.push(...(await systemMounts(readOnly)));
    // Wheels the host's pip config points at (offline installs), when present.
    if (process.env.PIP_FIND_LINKS?.startsWith("/"))
      args.push("--ro-bind-try", process.env.PIP_FIND_LINKS, process.env.PIP_FIND_LINKS);
    args.push("--ro-bind", shim, SHIM_MOUNT, "--ro-bind", RUNNERS_DIR, RUNNERS_MOUNT);
    args.push("--bind", sbx.dataDir, USER_DATA, "--bind", sbx.homeDir, sbx.home);
    return args;
  }
}

/** PIDs whose session ID is `sid` (field 6 of /proc/<pid>/stat, read after the command name). */
/** The members of session `sid` and all their descendants, whatever session they made. */
function sessionTree(sid: number): number[] {
  const procs: { pid: number; ppid: number; sid: number }[] = [];
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return [];
  }
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      procs.push({ pid: Number(name), ppid: Number(fields[1]), sid: Number(fields[3]) });
    } catch {
      // exited meanwhile
    }
  }
  const tree = new Set(procs.filter((p) => p.sid === sid).map((p) => p.pid));
  // Bounded: each round adds at least one process, or stops.
  for (let grown = true; grown;) {
    grown = false;
    for (const p of procs)
      if (!tree.has(p.pid) && tree.has(p.ppid)) {
        tree.add(p.pid);
        grown = true;
      }
  }
  return [...tree];
}

/** Runs a process to completion (used for package installs and small helpers in the fakes). */
export function collect(
  child: ChildProcess,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr?.on("data", (c: Buffer) => (stderr += c.toString()));
    child.once("close", (code, signal) =>
      resolve({ code: code ?? (signal ? 128 + 9 : 1), stdout, stderr }),
    );
  });
}
