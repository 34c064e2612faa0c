/**
 * Lifetimes of Docker sandboxes. A container's end is a label set at create
 * (`sandpit.dev/expires-at`), but labels cannot change on an existing container, so a later
 * `setTimeout` is kept in a small file per container in the provider's state directory on the
 * host; the file, when present, wins. Any process using the same state directory (and engine)
 * sees the same end, stopped containers included, without starting them.
 */
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";

export const LIFETIME_LABEL = {
  /** Milliseconds since the epoch at which the container is removed. */
  expiresAt: "sandpit.dev/expires-at",
  /** Idle this long (sandboxd's idle time), the container is stopped. */
  idleTimeoutMs: "sandpit.dev/idle-timeout-ms",
} as const;

export class LifetimeOverrides {
  readonly #dir: string;

  constructor(dir: string) {
    this.#dir = dir;
  }

  #file(name: string): string {
    return join(this.#dir, `${name}.expires-at`);
  }

  /** The container's end: the override, else its label; undefined when it has none. */
  async expiresAt(name: string, labels: Record<string, string>): Promise<number | undefined> {
    const override = await readFile(this.#file(name), "utf8").catch(() => "");
    const ms = Number(override.trim() || labels[LIFETIME_LABEL.expiresAt]);
    return Number.isFinite(ms) && ms > 0 ? ms : undefined;
  }

  async set(name: string, expiresAt: number): Promise<void> {
    await mkdir(this.#dir, { recursive: true });
    const tmp = `${this.#file(name)}.${process.pid}`;
    await writeFile(tmp, String(expiresAt));
    await rename(tmp, this.#file(name));
  }

  async remove(name: string): Promise<void> {
    await rm(this.#file(name), { force: true });
  }
}
