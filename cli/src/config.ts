/**
 * Which Sandpit config the CLI uses: `--config <file>`, else SANDPIT_CONFIG, else the first
 * `sandpit.yaml` (or `.yml`) in the working directory or one of its parents, else
 * `$XDG_CONFIG_HOME/sandpit/config.yaml` (~/.config/...), else the local provider with its
 * defaults. SANDPIT_PROVIDER then replaces `sandbox.use` (a name, or a comma-separated fallback
 * chain), so one config file can name every provider's options and the shell picks one.
 */
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import type { SandpitConfig } from "@sandpit/sdk";
import { usageError } from "./exit.ts";

// node:fs as its CommonJS object: an ESM import of it loads fs/promises and its dependencies,
// which a `sandpit exec` over its ticket (./fast-exec.ts) never uses.
const { existsSync, statSync } = process.getBuiltinModule("node:fs");

export interface ResolvedConfig {
  config: SandpitConfig;
  /** The file read, or undefined when none was found and the defaults apply. */
  path: string | undefined;
}

export function findConfigFile(
  explicit: string | undefined,
  cwd = process.cwd(),
): string | undefined {
  const named = explicit ?? process.env.SANDPIT_CONFIG;
  if (named) {
    const path = resolve(cwd, named);
    if (!existsSync(path)) throw usageError(`config file ${named} does not exist`);
    return path;
  }
  for (let dir = resolve(cwd); ; dir = dirname(dir)) {
    for (const name of ["sandpit.yaml", "sandpit.yml"]) {
      if (existsSync(join(dir, name))) return join(dir, name);
    }
    if (dirname(dir) === dir) break;
  }
  const user = join(
    process.env.XDG_CONFIG_HOME || join(homedir(), ".config"),
    "sandpit",
    "config.yaml",
  );
  return existsSync(user) ? user : undefined;
}

/**
 * What decides which provider (and which of its state directories) an invocation gets, as one
 * string: the config file found and its version (path, inode, size, mtime), SANDPIT_PROVIDER and
 * the home directory (the providers' default directories hang off it). Two invocations with the
 * same identity resolve the same config.
 */
export function configIdentity(explicit: string | undefined): string {
  const path = findConfigFile(explicit);
  const st = path ? statSync(path) : undefined;
  return JSON.stringify([
    path ?? null,
    st ? [st.ino, st.size, st.mtimeMs] : null,
    process.env.SANDPIT_PROVIDER ?? "",
    homedir(),
  ]);
}

export async function resolveConfig(explicit: string | undefined): Promise<ResolvedConfig> {
  const path = findConfigFile(explicit);
  const { loadConfigFile, parseConfig } = await import("@sandpit/sdk");
  const config = path ? await loadConfigFile(path) : { sandbox: { use: "local" } };
  const chosen = process.env.SANDPIT_PROVIDER?.split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (!chosen?.length) return { config, path };
  // Validated again so an unknown name in SANDPIT_PROVIDER is reported like one in the file.
  return {
    config: parseConfig({
      sandbox: { ...config.sandbox, use: chosen.length === 1 ? chosen[0]! : chosen },
    }),
    path,
  };
}
