/**
 * A real Docker engine for the test suites. Uses the one that answers at DOCKER_HOST or
 * /var/run/docker.sock; otherwise installs Debian's docker.io (as root, when missing) and starts
 * `dockerd` in the background with its pidfile and log in a state directory. Safe to call from
 * several processes at once (two test runs, say): a lock serialises the start, every process
 * using an engine the tests started registers itself, and the last one to let go stops it. An
 * engine the tests did not start (the system's) is never stopped.
 */
import { spawn, execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, openSync, closeSync } from "node:fs";
import { mkdir, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { homedir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { withLock } from "@sandpit/images/lock";

export interface DockerEngine {
  socketPath: string;
  /** True when this call started dockerd. */
  startedByUs: boolean;
  /**
   * Lets go of the engine: one the tests started is stopped once no other live process uses it
   * (whichever started it); the system's is left alone.
   */
  stop(): Promise<void>;
}

const DEFAULT_SOCKET = "/var/run/docker.sock";
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 30_000;
const run = promisify(execFile);

/** Where our dockerd keeps its pidfile and log (outside the repository). */
export function dockerdStateDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "sandpit", "dockerd");
}

export async function ensureDocker(
  o: { log?: (line: string) => void } = {},
): Promise<DockerEngine> {
  const log = o.log ?? (() => undefined);
  const socketPath = socketFromEnv();
  const stateDir = dockerdStateDir();
  const lock = join(stateDir, "start.lock");
  const lockOpts = {
    timeoutMs: 15 * 60_000, // covers a waiter behind an apt-get install of docker.io
    what: "dockerd start",
    log,
  };
  const notOurs: DockerEngine = { socketPath, startedByUs: false, stop: async () => undefined };
  const used = (startedByUs: boolean, user: string): DockerEngine => ({
    socketPath,
    startedByUs,
    stop: () => withLock(lock, lockOpts, () => letGo(stateDir, user, log)),
  });
  if ((await pingDocker(socketPath)) && !(await fixtureDockerd(stateDir))) return notOurs;
  await mkdir(stateDir, { recursive: true });
  return withLock(lock, lockOpts, async () => {
    // Another process may have started it while we waited for the lock.
    if (await pingDocker(socketPath)) {
      if (!(await fixtureDockerd(stateDir))) return notOurs;
      return used(false, await register(stateDir));
    }
    if (socketPath !== DEFAULT_SOCKET) {
      throw new Error(
        `no Docker engine answers at ${socketPath} (DOCKER_HOST); start it, or unset DOCKER_HOST to let the tests start one`,
      );
    }
    await installDockerIfMissing(log);
    const pid = await startDockerd(stateDir, socketPath, log);
    await writeFile(join(stateDir, FIXTURE_FILE), String(pid));
    return used(true, await register(stateDir));
  });
}

/** Names the dockerd the tests started (removed when it is stopped). */
const FIXTURE_FILE = "started-by-tests.pid";
const usersDir = (stateDir: string) => join(stateDir, "users");

/** The PID of the running dockerd the tests started, or undefined. */
async function fixtureDockerd(stateDir: string): Promise<number | undefined> {
  const pid = Number.parseInt(
    await readFile(join(stateDir, FIXTURE_FILE), "utf8").catch(() => ""),
    10,
  );
  return Number.isFinite(pid) && signal(pid, 0) ? pid : undefined;
}

/**
 * Records a user of the tests' dockerd (under the start lock): one per call, so two users in one
 * process (two projects' global setups) count as two. Named `<pid>.<random>`.
 */
async function register(stateDir: string): Promise<string> {
  const user = `${process.pid}.${randomUUID()}`;
  await mkdir(usersDir(stateDir), { recursive: true });
  await writeFile(join(usersDir(stateDir), user), "");
  return user;
}

/**
 * `user` no longer uses the tests' dockerd (under the start lock): when no other user in a live
 * process does, it is stopped. Users whose process died without letting go are forgotten here.
 */
async function letGo(stateDir: string, user: string, log: (line: string) => void): Promise<void> {
  const dir = usersDir(stateDir);
  await rm(join(dir, user), { force: true });
  const users = await readdir(dir).catch(() => [] as string[]);
  const others = users.filter((name) => signal(Number.parseInt(name, 10), 0));
  const dead = users.filter((name) => !others.includes(name));
  await Promise.all(dead.map((name) => rm(join(dir, name), { force: true })));
  const pid = await fixtureDockerd(stateDir);
  if (others.length > 0 || pid === undefined) return;
  await stopDockerd(pid, stateDir, log);
  await rm(join(stateDir, FIXTURE_FILE), { force: true });
}

/** DOCKER_HOST=unix:///path is honoured; other schemes are not something these tests can start. */
function socketFromEnv(): string {
  const host = process.env.DOCKER_HOST;
  if (!host) return DEFAULT_SOCKET;
  if (host.startsWith("unix://")) return host.slice("unix://".length);
  throw new Error(`DOCKER_HOST=${host}: the test fixture supports unix:// sockets only`);
}

/** True when a Docker engine answers GET /_ping on the socket within 2 s. */
export function pingDocker(socketPath: string): Promise<boolean> {
  if (!existsSync(socketPath)) return Promise.resolve(false);
  return new Promise((resolve) => {
    const req = request({ socketPath, path: "/_ping", timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(false));
    req.end();
  });
}

async function installDockerIfMissing(log: (line: string) => void): Promise<void> {
  if (existsSync("/usr/sbin/dockerd") || existsSync("/usr/bin/dockerd")) return;
  if (process.getuid?.() !== 0) {
    throw new Error(
      "dockerd is not installed and no Docker engine is running; as root the tests install Debian's docker.io, otherwise run: sudo apt-get install -y docker.io",
    );
  }
  log("installing docker.io with apt-get");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  await run("apt-get", ["update"], { env, timeout: 300_000, maxBuffer: 64 << 20 });
  await run("apt-get", ["install", "-y", "docker.io"], {
    env,
    timeout: 600_000,
    maxBuffer: 64 << 20,
  });
}

async function startDockerd(
  stateDir: string,
  socketPath: string,
  log: (line: string) => void,
): Promise<number> {
  if (process.getuid?.() !== 0) {
    throw new Error(
      `no Docker engine answers at ${socketPath} and starting dockerd needs root; start Docker (e.g. sudo systemctl start docker) and re-run`,
    );
  }
  await mkdir(stateDir, { recursive: true });
  const logPath = join(stateDir, "dockerd.log");
  const pidPath = join(stateDir, "dockerd.pid");
  // A socket file with nothing behind it (a dockerd that was killed) makes dockerd refuse to start.
  await rm(socketPath, { force: true });
  log(`starting dockerd (log: ${logPath})`);
  const out = openSync(logPath, "a");
  const child = spawn("dockerd", ["--host", `unix://${socketPath}`, "--pidfile", pidPath], {
    detached: true, // its own process group, so it outlives a vitest worker and ignores our ^C
    stdio: ["ignore", out, out],
    env: {
      ...process.env,
      PATH: `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${process.env.PATH ?? ""}`,
    },
  });
  closeSync(out);
  let exited: string | null = null;
  child.once("exit", (code, signal) => (exited = `exited with ${signal ?? code}`));
  child.once("error", (err) => (exited = `could not start: ${err.message}`));
  child.unref();
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (await pingDocker(socketPath)) {
      log(`dockerd (pid ${child.pid}) answers at ${socketPath}`);
      return child.pid!;
    }
    if (exited) throw new Error(`dockerd ${exited}; its log:\n${await logTail(logPath)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  if (child.pid) process.kill(child.pid, "SIGTERM");
  throw new Error(
    `dockerd did not answer within ${START_TIMEOUT_MS / 1000} s; its log:\n${await logTail(logPath)}`,
  );
}

/** SIGTERM, then wait (bounded) for it to go, then SIGKILL: dockerd stops its containers first. */
async function stopDockerd(
  pid: number,
  stateDir: string,
  log: (line: string) => void,
): Promise<void> {
  const recorded = Number.parseInt(
    await readFile(join(stateDir, "dockerd.pid"), "utf8").catch(() => ""),
    10,
  );
  // dockerd removes its pidfile as it exits; a different PID there means it is not ours any more.
  if (Number.isFinite(recorded) && recorded !== pid) return;
  if (!signal(pid, "SIGTERM")) return;
  const deadline = Date.now() + STOP_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (!signal(pid, 0)) {
      log(`dockerd (pid ${pid}) stopped`);
      return;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  log(`dockerd (pid ${pid}) did not stop within ${STOP_TIMEOUT_MS / 1000} s; killing it`);
  signal(pid, "SIGKILL");
}

function signal(pid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(pid, sig);
    return true;
  } catch {
    return false;
  }
}

async function logTail(path: string): Promise<string> {
  const text = await readFile(path, "utf8").catch(() => "(no log)");
  return text.split("\n").slice(-40).join("\n");
}
