/** Shared by the Docker provider's suites: the docker CLI, cleanup, and other processes. */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

export const docker = (...args: string[]): Promise<string> =>
  run("docker", args).then((r) => r.stdout.trim());

/** Names of containers (all states) or volumes whose name starts with `prefix`. */
export async function containersNamed(prefix: string): Promise<string[]> {
  return (await docker("ps", "-a", "--filter", `name=^${prefix}`, "--format", "{{.Names}}"))
    .split("\n")
    .filter(Boolean);
}

export async function volumesNamed(prefix: string): Promise<string[]> {
  return (await docker("volume", "ls", "--filter", `name=^${prefix}`, "--format", "{{.Name}}"))
    .split("\n")
    .filter(Boolean);
}

/** Removes every container and volume of a test's prefix. */
export async function removeAll(prefix: string): Promise<void> {
  const names = await containersNamed(`${prefix}-`);
  if (names.length) await docker("rm", "-f", "-v", ...names);
  const volumes = await volumesNamed(`${prefix}-`);
  if (volumes.length) await docker("volume", "rm", "-f", ...volumes);
}

/**
 * Another process: an ES module script run by this Node from the repository root (so it
 * imports `@sandpit/sdk/docker` as a user would). Resolves with the JSON of its last stdout
 * line; rejects when it exits non-zero, with its stderr.
 */
export function runScript<T>(script: string, timeoutMs = 120_000): Promise<T> {
  const child = startScript(script);
  return new Promise<T>((resolve, reject) => {
    let out = "";
    let err = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr!.on("data", (c: Buffer) => (err += c.toString()));
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(JSON.parse(out.trim().split("\n").at(-1)!) as T);
      else reject(new Error(`script exited with ${code ?? signal}: ${err.slice(-2000)}`));
    });
  });
}

/** The same script, left running: its stdin is open until the caller ends it. */
export function startScript(script: string): ChildProcess {
  return spawn(process.execPath, ["--input-type=module", "-e", script], {
    cwd: process.cwd(),
    stdio: ["pipe", "pipe", "pipe"],
  });
}

/** Polls `check` every `everyMs` until it returns true or `timeoutMs` passed; returns the last answer. */
export async function eventually(
  check: () => Promise<boolean>,
  timeoutMs: number,
  everyMs = 250,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
