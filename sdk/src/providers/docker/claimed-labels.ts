/**
 * Labels of claimed warm containers. A warm container is started blank, before anyone asks for
 * it, and a running container's labels cannot change; so when a create claims one (a rename to
 * the thread's name), the labels it would have been started with (user, thread, the caller's
 * labels, its lifetime) are kept in a small file per container in the provider's state
 * directory on the host, beside the lifetime overrides (./lifetime.ts), and read over the
 * container's own wherever labels are read: list, get, the reaper. Any process using the same
 * state directory (and engine) sees the same labels, stopped containers included.
 */
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";

export class ClaimedLabels {
  readonly #dir: string;

  constructor(dir: string) {
    this.#dir = dir;
  }

  #file(name: string): string {
    return join(this.#dir, `${name}.labels.json`);
  }

  /** The container's labels, with those its claim gave it over them. */
  async of(c: { name: string; labels: Record<string, string> }): Promise<Record<string, string>> {
    const text = await readFile(this.#file(c.name), "utf8").catch(() => "");
    if (!text) return c.labels;
    try {
      return { ...c.labels, ...(JSON.parse(text) as Record<string, string>) };
    } catch {
      return c.labels; // a torn file: written by rename, so only ever from outside
    }
  }

  /** Written before the claim's rename: a claimed container is never without its labels. */
  async set(name: string, labels: Record<string, string>): Promise<void> {
    await mkdir(this.#dir, { recursive: true });
    const tmp = `${this.#file(name)}.${process.pid}`;
    await writeFile(tmp, JSON.stringify(labels));
    await rename(tmp, this.#file(name));
  }

  async remove(name: string): Promise<void> {
    await rm(this.#file(name), { force: true });
  }
}
