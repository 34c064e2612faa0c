/**
 * The Node versions a consumer project is tested on, from the npm registry's `node` package (as
 * the repository's own Node is), installed once into the user's cache directory, never into the
 * repository: the oldest line the SDK supports (Node 22, its latest release) and the
 * repository's Node 24.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rename, rm } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

export const NODE_VERSIONS = ["22.23.3", "24.21.0"] as const;

export function cacheDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "sandpit");
}

/**
 * The `node` binary of `version`, installed on first use into <cache>/node/<version>. Installed
 * into a scratch directory and renamed into place, so a concurrent or interrupted install never
 * leaves a half-installed version behind.
 */
export async function ensureNode(version: string): Promise<string> {
  const dir = join(cacheDir(), "node", version);
  const bin = join(dir, "node_modules", "node", "bin", "node");
  if (existsSync(bin)) return bin;
  await mkdir(join(cacheDir(), "node"), { recursive: true });
  const scratch = await mkdtemp(join(cacheDir(), "node", `.${version}-`));
  try {
    await promisify(execFile)(
      "npm",
      [
        "install",
        "--prefix",
        scratch,
        "--no-save",
        "--no-package-lock",
        "--no-audit",
        "--no-fund",
        `node@${version}`,
      ],
      { cwd: scratch, timeout: 300_000 },
    );
    await rename(scratch, dir).catch((err: NodeJS.ErrnoException) => {
      // Another run installed it first: theirs is as good as ours.
      if (err.code !== "ENOTEMPTY" && err.code !== "EEXIST") throw err;
    });
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
  return bin;
}
