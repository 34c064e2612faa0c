/**
 * Sandbox tokens of the Docker provider, which no container holds. A container is given only
 * its token's SHA-256 (`SANDBOXD_TOKEN_SHA256`), so code in it cannot read the token from any
 * environment (PID 1's included); the token itself is derived on the host, as the Kubernetes
 * provisioner derives those of reserved pods (operator/src/api/reservations.ts):
 *
 *   token = HMAC-SHA256(key, "docker-sandbox-token\0" + token id + "\0" + container name)
 *
 * The key is 32 random bytes in `<stateDir>/token.key` (0600), made once by whichever process
 * needs it first; the token id is random per container, a label (`sandpit.dev/token-id`). So
 * every process on the same state directory computes any sandbox's token from the container's
 * labels and name, and nothing else knows it. The name is part of it so that a warm container
 * claimed by a thread (renamed) has a new token, given to sandboxd by `/v1/init`, and the warm
 * one stops working. Such a container's sandboxd starts again with the digest it was created
 * with, so the name it was created under is a label too (`sandpit.dev/created-as`): the provider
 * hands sandboxd the current token again after a restart.
 */
import { createHash, createHmac, randomBytes } from "node:crypto";
import { link, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { SandboxError } from "../../errors.ts";

export const TOKEN_LABEL = {
  /** Random per container: its tokens derive from it. */
  id: "sandpit.dev/token-id",
  /** The name the container was created under: its sandboxd starts with that name's token. */
  createdAs: "sandpit.dev/created-as",
  /** The first 16 hex digits of the key's SHA-256: which state directory's key it needs. */
  key: "sandpit.dev/token-key",
} as const;

const KEY_FILE = "token.key";

export function sandboxToken(key: Buffer, tokenId: string, name: string): string {
  return createHmac("sha256", key)
    .update(`docker-sandbox-token\0${tokenId}\0${name}`)
    .digest("hex");
}

export function tokenDigest(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

/** What a container's sandboxd accepts. */
export interface SandboxTokens {
  /** The token for the container's current name: the one every call uses. */
  live: string;
  /** The one its sandboxd starts with (its environment's digest); differs once it was renamed. */
  boot: string;
}

/** A container as far as its tokens go. */
interface TokenSource {
  name: string;
  labels: Record<string, string>;
  env: Record<string, string>;
}

export class TokenKeys {
  readonly #dir: string;
  #key: Promise<Buffer> | null = null;

  constructor(stateDir: string) {
    this.#dir = stateDir;
  }

  /** The labels and environment a new container named `name` is created with. */
  async forNew(name: string): Promise<{ labels: Record<string, string>; digest: string }> {
    const key = await this.key();
    const id = randomBytes(16).toString("hex");
    return {
      labels: {
        [TOKEN_LABEL.id]: id,
        [TOKEN_LABEL.createdAs]: name,
        [TOKEN_LABEL.key]: fingerprint(key),
      },
      digest: tokenDigest(sandboxToken(key, id, name)),
    };
  }

  /**
   * A container's tokens. One made before tokens were derived has its token in its environment
   * (and keeps it). UNAUTHORIZED for a container whose tokens come from another state
   * directory's key: this provider cannot open it.
   */
  async of(c: TokenSource): Promise<SandboxTokens> {
    const id = c.labels[TOKEN_LABEL.id];
    if (!id) {
      const token = c.env.SANDBOXD_TOKEN;
      if (!token)
        throw new SandboxError(
          `container ${c.name} is not a Sandpit sandbox (no token)`,
          "INTERNAL",
        );
      return { live: token, boot: token };
    }
    const key = await this.key();
    if (c.labels[TOKEN_LABEL.key] !== fingerprint(key))
      throw new SandboxError(
        `sandbox ${c.name} was made by a Docker provider with another state directory (its token key is not the one in ${this.#dir}): use the stateDir it was made with`,
        "UNAUTHORIZED",
      );
    return {
      live: sandboxToken(key, id, c.name),
      boot: sandboxToken(key, id, c.labels[TOKEN_LABEL.createdAs] ?? c.name),
    };
  }

  /** The key, read once; made when there is none. */
  key(): Promise<Buffer> {
    this.#key ??= readOrMakeKey(this.#dir).catch((err: unknown) => {
      this.#key = null;
      throw err;
    });
    return this.#key;
  }
}

/**
 * Reads `<dir>/token.key`, making it first if missing: written whole under a name of its own
 * (0600), then linked to its place, which fails if another process got there first; everyone
 * then reads the one that won. A key is never half-written, and never replaced.
 */
async function readOrMakeKey(dir: string): Promise<Buffer> {
  const file = join(dir, KEY_FILE);
  try {
    let text = await readFile(file, "utf8").catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "ENOENT") throw err;
      return null;
    });
    if (text === null) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      const tmp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}`;
      await writeFile(tmp, randomBytes(32).toString("hex") + "\n", { mode: 0o600, flag: "wx" });
      try {
        await link(tmp, file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      } finally {
        await rm(tmp, { force: true });
      }
      text = await readFile(file, "utf8");
    }
    const hex = text.trim();
    if (!/^[0-9a-f]{64}$/.test(hex))
      throw new SandboxError(
        `${file} is not a Sandpit token key (64 hex digits); it was changed from outside`,
        "INTERNAL",
      );
    return Buffer.from(hex, "hex");
  } catch (err) {
    if (err instanceof SandboxError) throw err;
    throw new SandboxError(
      `cannot read or create the sandbox token key in ${dir} (${(err as NodeJS.ErrnoException).code ?? String(err)}): set stateDir to a directory this user can write`,
      "INVALID_ARGUMENT",
      err,
    );
  }
}

function fingerprint(key: Buffer): string {
  return createHash("sha256").update(key).digest("hex").slice(0, 16);
}
