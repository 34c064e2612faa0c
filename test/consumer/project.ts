/**
 * A consumer project outside the repository: a temporary directory with its own package.json
 * into which the packed tarballs (scripts/pack.ts) are installed the way a user would, with
 * `npm install <tarballs>`, under the Node version being tested (so npm checks the packages'
 * `engines` against it, strictly).
 */
import { execFile } from "node:child_process";
import { cp, mkdtemp, mkdir, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { packWorkspace } from "../../scripts/pack.ts";

const run = promisify(execFile);
const FIXTURES = fileURLToPath(new URL("./fixtures/", import.meta.url));
export const REPO_ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** Packs `workspaces` (e.g. ["sdk"], later ["sdk", "cli"]) into a fresh temp dir. */
export async function packTarballs(workspaces: string[]): Promise<string[]> {
  const out = await mkdtemp(join(tmpdir(), "sandpit-tarballs-"));
  const tarballs: string[] = [];
  for (const ws of workspaces) tarballs.push(await packWorkspace(ws, out));
  return tarballs;
}

export interface Consumer {
  dir: string;
  node: string;
  /** Runs `node <file> ...args` in the project; stdout and stderr apart. */
  exec(
    file: string,
    args?: string[],
    env?: NodeJS.ProcessEnv,
  ): Promise<{ stdout: string; stderr: string }>;
  /**
   * Runs an installed bin (node_modules/.bin/<name>) in the project as a shell would, with this
   * Node first on PATH (the bin's `#!/usr/bin/env node` finds it); a non-zero exit is a result.
   */
  bin(
    name: string,
    args?: string[],
    env?: NodeJS.ProcessEnv,
  ): Promise<{ code: number; stdout: string; stderr: string }>;
  /** The environment `exec` and `bin` run with, for a caller that spawns a bin itself. */
  env: NodeJS.ProcessEnv;
}

/**
 * Makes a project in a temp dir, copies the fixtures in, and installs `packages` (tarball paths
 * or registry specs) with npm run by `node`.
 */
export async function makeConsumer(node: string, packages: string[]): Promise<Consumer> {
  const dir = await mkdtemp(join(tmpdir(), "sandpit-consumer-"));
  await writeFile(
    join(dir, "package.json"),
    JSON.stringify({ name: "sandpit-consumer", private: true, type: "module" }, null, 2),
  );
  await cp(FIXTURES, dir, { recursive: true });
  await mkdir(join(dir, "sandboxes"));
  const env = { ...process.env, PATH: `${dirname(node)}:${process.env.PATH ?? ""}` };
  await run(
    "npm",
    [
      "install",
      "--engine-strict",
      "--install-links",
      "--no-audit",
      "--no-fund",
      "--no-package-lock",
      ...packages,
    ],
    { cwd: dir, env, timeout: 300_000 },
  );
  return {
    dir,
    node,
    env,
    exec: async (file, args = [], extraEnv = {}) =>
      run(node, [file, ...args], {
        cwd: dir,
        env: { ...env, ...extraEnv },
        timeout: 120_000,
      }),
    bin: async (name, args = [], extraEnv = {}) =>
      run(join(dir, "node_modules", ".bin", name), args, {
        cwd: dir,
        env: { ...env, ...extraEnv },
        timeout: 120_000,
      }).then(
        ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
        (err: { code?: unknown; stdout?: string; stderr?: string }) => {
          // A spawn failure (ENOENT, a timeout's kill) is no exit code: it fails the caller.
          if (typeof err.code !== "number") throw err;
          return { code: err.code, stdout: err.stdout ?? "", stderr: err.stderr ?? "" };
        },
      ),
  };
}
