/**
 * `sandpit serve`'s state directory: what must outlive the process and is not the sandboxes'
 * own (they keep their records on the backend: ./provider-store.ts). All of it private (0700
 * directory, 0600 files):
 *
 *   serve.json   this state's id, on every sandbox it makes (so two states never mix)
 *   secret       the key DeerFlow capabilities are derived with (../capability.ts)
 *   e2b-secret   the key the E2B API's envd access tokens are derived with (../api/e2b/tokens.ts),
 *                unless SANDPIT_E2B_TOKEN_SECRET is set
 *   keys.json    the API keys, generated on first start unless SANDPIT_API_KEYS(_FILE) is set
 *   sandboxes/   the local backend's sandboxes (Docker keeps its own in containers and volumes)
 */
import { randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";

export interface ServeState {
  dir: string;
  id: string;
  secret: Buffer;
}

/** The default state directory: $XDG_STATE_HOME/sandpit/serve, else ~/.local/state/sandpit/serve. */
export function defaultStateDir(env: NodeJS.ProcessEnv): string {
  return join(env.XDG_STATE_HOME || join(homedir(), ".local", "state"), "sandpit", "serve");
}

/** Reads a file of the state, writing `make()`'s content first when it does not exist yet. */
async function kept(path: string, make: () => string): Promise<string> {
  try {
    return await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  const content = make();
  // "wx": of two serve processes starting on one new state, one writes and both read its file.
  await writeFile(path, content, { mode: 0o600, flag: "wx" }).catch((err: unknown) => {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  });
  return readFile(path, "utf8");
}

export async function openState(dir: string): Promise<ServeState> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
  const meta = JSON.parse(
    await kept(join(dir, "serve.json"), () =>
      JSON.stringify({ id: `s${randomBytes(6).toString("hex")}` }),
    ),
  ) as { id: string };
  const secret = Buffer.from(
    (await kept(join(dir, "secret"), () => randomBytes(32).toString("base64url"))).trim(),
    "base64url",
  );
  return { dir, id: meta.id, secret };
}

/** The keys file of the state, with one key for tenant "default" made on first use. */
export async function generatedKeysFile(dir: string): Promise<{ path: string; firstKey: string }> {
  const path = join(dir, "keys.json");
  const keys = JSON.parse(
    await kept(path, () =>
      JSON.stringify(
        [
          {
            key: `sp_${randomBytes(24).toString("base64url")}`,
            tenant: "default",
            maxSandboxes: 100,
          },
        ],
        null,
        2,
      ),
    ),
  ) as { key: string }[];
  return { path, firstKey: keys[0]?.key ?? "" };
}

/**
 * The E2B API's token secret of the state, made on first use: kept, so a restart hands out the
 * same envd access tokens and E2B clients stay connected. Its own key rather than `secret`
 * reused, so either can be replaced without the other.
 */
export async function e2bTokenSecret(dir: string): Promise<string> {
  return (await kept(join(dir, "e2b-secret"), () => randomBytes(32).toString("base64url"))).trim();
}
