/**
 * The Python that runs a pytest suite (DeerFlow's, the E2B conformance suite): a virtualenv with
 * one requirements file's exact pins, made once per (requirements, interpreter) under the
 * user's cache, outside the repository. A warm
 * run only reads a marker file; a cold one installs into a scratch directory and renames it into
 * place, so an interrupted or concurrent install never leaves a half-made venv behind the key.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const HERE = new URL(".", import.meta.url).pathname;
export const REQUIREMENTS = join(HERE, "requirements.txt");

const CACHE =
  process.env.SANDPIT_PYTHON_CACHE ??
  join(
    process.env.XDG_CACHE_HOME ?? join(process.env.HOME ?? "/root", ".cache"),
    "sandpit",
    "deerflow-venv",
  );
const MARKER = ".sandpit-complete";

/**
 * Returns the venv's python (always run as `python -m ...`: the venv may have been renamed into
 * place, so its scripts' shebangs name the scratch directory).
 */
export async function ensureVenv(
  log: (line: string) => void = () => {},
  requirements = REQUIREMENTS,
): Promise<string> {
  // The interpreter on PATH, the one scripts/lib/ensure-deps.sh makes sure can create venvs.
  // A venv is bound to the Python that made it, so that Python is part of the key.
  const { stdout: interpreter } = await run("python3", [
    "-c",
    "import sys; print(sys.executable); print(sys.version)",
  ]).catch((err: Error) => {
    throw new Error(`python3 is needed for the pytest suites: ${err.message}`);
  });
  const key = createHash("sha256")
    .update(readFileSync(requirements))
    .update(interpreter)
    .digest("hex")
    .slice(0, 16);
  const dir = join(CACHE, key);
  const python = join(dir, "bin", "python");
  if (existsSync(join(dir, MARKER))) return python;

  log(`creating a Python venv for ${requirements} in ${dir}`);
  const scratch = `${dir}.tmp-${process.pid}`;
  await mkdir(CACHE, { recursive: true });
  await rm(scratch, { recursive: true, force: true });
  try {
    await run("python3", ["-m", "venv", scratch]).catch((err: Error) => {
      throw new Error(
        `python3 -m venv failed (on Debian it needs the python3-venv package, which ` +
          `scripts/lib/ensure-deps.sh installs): ${err.message}`,
      );
    });
    const pip = [join(scratch, "bin", "python"), "-m", "pip"];
    const quiet = ["--quiet", "--disable-pip-version-check", "--no-input"];
    // Every package is pinned in the file, so nothing is resolved: --no-deps, wheels only,
    // then pip check proves the pins form a complete, consistent set.
    await run(
      pip[0]!,
      [
        ...pip.slice(1),
        "install",
        ...quiet,
        "--no-deps",
        "--only-binary=:all:",
        "-r",
        requirements,
      ],
      { timeout: 15 * 60_000, maxBuffer: 16 * 1024 * 1024 },
    );
    await run(pip[0]!, [...pip.slice(1), "check", "--disable-pip-version-check"]);
    await writeFile(join(scratch, MARKER), `${interpreter}`);
    await rename(scratch, dir).catch(async (err: NodeJS.ErrnoException) => {
      // Another run finished the same venv first: keep theirs.
      if (!existsSync(join(dir, MARKER))) throw err;
      await rm(scratch, { recursive: true, force: true });
    });
  } catch (err) {
    await rm(scratch, { recursive: true, force: true });
    throw err;
  }
  return python;
}
