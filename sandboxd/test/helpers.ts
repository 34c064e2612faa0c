/** Starts a real sandboxd process (sandboxd/src/main.ts) on a temporary root for tests. */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const MAIN = fileURLToPath(new URL("../src/main.ts", import.meta.url));

export interface TestSandboxd {
  url: string;
  token: string;
  /** Host directory served as /mnt/user-data. */
  root: string;
  child: ChildProcess;
  /** Authorised fetch against sandboxd. */
  call(path: string, init?: RequestInit): Promise<Response>;
  stop(): Promise<void>;
}

/** Starts sandboxd with `env` over the defaults; a variable set to null is left unset. */
export async function startSandboxd(
  env: Record<string, string | null> = {},
): Promise<TestSandboxd> {
  const root = await mkdtemp(join(tmpdir(), "sandboxd-test-"));
  const token = randomBytes(32).toString("hex");
  const merged: Record<string, string | null> = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: root,
    SANDBOXD_LISTEN: "127.0.0.1:0",
    SANDBOXD_ROOT: root,
    SANDBOXD_TOKEN: token,
    SANDBOXD_LOG_LEVEL: "error",
    ...env,
  };
  const child = spawn(process.execPath, [MAIN], {
    env: Object.fromEntries(
      Object.entries(merged).filter((e): e is [string, string] => e[1] !== null),
    ),
    stdio: ["ignore", "pipe", "inherit"],
  });
  const line = await new Promise<string>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`sandboxd exited with ${code}`)));
    createInterface({ input: child.stdout! }).once("line", resolve);
  });
  const { port } = JSON.parse(line) as { port: number };
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    token,
    root,
    child,
    call: (path, init = {}) =>
      fetch(url + path, {
        ...init,
        headers: { authorization: `Bearer ${token}`, ...(init.headers as Record<string, string>) },
      }),
    stop: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await exited;
      }
      await rm(root, { recursive: true, force: true });
    },
  };
}

export function json(body: unknown): RequestInit {
  return {
    method: "POST",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json" },
  };
}

/** PIDs of live processes whose command line contains `marker`. */
export async function processesMatching(marker: string): Promise<number[]> {
  const { readdir, readFile } = await import("node:fs/promises");
  const found: number[] = [];
  for (const name of await readdir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    // Arguments are NUL-separated in /proc; join them with spaces as a shell would show them.
    const cmdline = (await readFile(`/proc/${name}/cmdline`, "utf8").catch(() => "")).replaceAll(
      "\0",
      " ",
    );
    if (cmdline.includes(marker) && Number(name) !== process.pid) found.push(Number(name));
  }
  return found;
}
