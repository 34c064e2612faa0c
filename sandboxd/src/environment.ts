/**
 * What a sandboxed process gets to see: a scrubbed environment, the interpreters Sandpit runs
 * code with, and (with bubblewrap) a private mount, PID, IPC and UTS namespace in which the
 * sandbox's root directory is mounted at /mnt/user-data.
 */
import * as fs from "node:fs/promises";
import { delimiter, dirname, join } from "node:path";

// Not ES imports of node:fs and node:util: an ES import reads every export of a built-in, and
// their lazy getters load some thirty more of Node's modules in sandboxd's start-up. And
// node:child_process is loaded only when python has to be asked where it is.
const { existsSync } = process.getBuiltinModule("node:fs");

/** Variables a sandbox may inherit from its host: locale, paths, and proxy/registry settings. */
const INHERITABLE = [
  /^(PATH|HOME|USER|LOGNAME|SHELL|TERM|TZ|LANG|LANGUAGE)$/,
  /^LC_[A-Z]+$/,
  /^(HTTP_PROXY|HTTPS_PROXY|NO_PROXY|ALL_PROXY|http_proxy|https_proxy|no_proxy|all_proxy)$/,
  /^(SSL_CERT_FILE|SSL_CERT_DIR|NODE_EXTRA_CA_CERTS|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|PIP_CERT)$/,
  /^PIP_[A-Z_]+$/,
  /^npm_config_[a-z_]+$/i,
  /^UV_[A-Z_]+$/,
];
/** Names that look like credentials are dropped even when their prefix is inheritable. */
const SECRET = /(TOKEN|SECRET|PASSW|PASSWD|CREDENTIAL|API_?KEY|PRIVATE|AUTH|SESSION|COOKIE)/i;
/** Values that carry credentials inline (a proxy URL with user:password@). */
const SECRET_VALUE = /:\/\/[^/\s:@]+:[^/\s@]+@/;

/** Keeps only inheritable, non-secret variables. Sandboxes never see the host's secrets. */
export function scrubEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined || SECRET.test(name) || SECRET_VALUE.test(value)) continue;
    if (INHERITABLE.some((re) => re.test(name))) out[name] = value;
  }
  return out;
}

export interface Interpreters {
  /** Real python3 executable (not a version-manager shim) and its prefix. */
  python: string;
  pythonPrefix: string;
  /** Node executable that runs TypeScript cells (Node 24: types are stripped natively). */
  node: string;
  /** npm's CLI entry point, when npm is installed. */
  npmCli: string | null;
}

/**
 * Finds the interpreters once. `SANDBOXD_PYTHON` pins python (an image sets it); otherwise the
 * `python3` on PATH is asked for its real executable, which sees through pyenv-style shims.
 */
export async function discoverInterpreters(env: NodeJS.ProcessEnv): Promise<Interpreters> {
  let python = env.SANDBOXD_PYTHON ?? "";
  let pythonPrefix = env.SANDBOXD_PYTHON_PREFIX ?? "";
  if (!python || !pythonPrefix) {
    try {
      const { execFile } = process.getBuiltinModule("node:child_process");
      const run = process.getBuiltinModule("node:util").promisify(execFile);
      const { stdout } = await run(
        python || "python3",
        ["-c", "import sys; print(sys.executable); print(sys.prefix)"],
        {
          env: { PATH: env.PATH ?? "/usr/bin:/bin" },
          timeout: 10_000,
        },
      );
      [python = "", pythonPrefix = ""] = stdout.trim().split("\n");
    } catch {
      python = python || "python3"; // reported when a python cell actually runs
      pythonPrefix = "/usr";
    }
  }
  return { python, pythonPrefix, node: process.execPath, npmCli: await findNpmCli(env.PATH ?? "") };
}

async function findNpmCli(path: string): Promise<string | null> {
  const candidates = path
    .split(delimiter)
    .filter(Boolean)
    .map((dir) => join(dir, "npm"));
  candidates.push(
    join(dirname(process.execPath), "..", "lib", "node_modules", "npm", "bin", "npm-cli.js"),
  );
  for (const candidate of candidates) {
    if (!existsSync(candidate)) continue;
    const real = await fs.realpath(candidate).catch(() => null);
    if (real?.endsWith(".js")) return real;
  }
  return null;
}

/**
 * Puts `python3`, `python`, `pip` and `node` links to the interpreters Sandpit uses in
 * `binDir`, which sandboxd puts first on every process's PATH, so `python3 x.py` in a command
 * and a python cell run the same interpreter (and see the same installed packages).
 */
export async function installShims(binDir: string, interp: Interpreters): Promise<void> {
  await fs.mkdir(binDir, { recursive: true });
  const links: Record<string, string> = {
    python3: interp.python,
    python: interp.python,
    node: interp.node,
  };
  const pip = join(interp.pythonPrefix, "bin", "pip3");
  if (existsSync(pip)) links.pip = links.pip3 = pip;
  for (const [name, target] of Object.entries(links)) {
    await fs.rm(join(binDir, name), { force: true });
    await fs.symlink(target, join(binDir, name));
  }
}
