/**
 * Labels of claimed warm containers. A warm container is started blank, before anyone asks for
 * it, and a running container's labels cannot change; so when a create claims one (a rename to
 * the thread's name), the labels it would have been started with (user, thread, the caller's
 * labels, its lifetime) are kept in a small file per container in the provider's state
 * directory on the host, beside the lifetime overrides (./lifetime.ts), and read over the
 * container's own wherever labels are read: list, get, the reaper. Any process using the same
 * state directory (and engine) sees the same labels, stopped containers included.
 *
 * The files are read and written with synchronous calls: a few hundred bytes each, on a claim's
 * path, where each awaited call would be a trip through libuv's thread pool (0.1–0.5 ms here).
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
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
    let text = "";
    try {
      text = readFileSync(this.#file(c.name), "utf8");
    } catch {
      // none: the container's own labels
    }
    if (!text) return c.labels;
    try {
      return { ...c.labels, ...(JSON.parse(text) as Record<string, string>) };
    } catch {
      return c.labels; // a torn file: written by rename, so only ever from outside
    }
  }

  /** Written before the claim's rename: a claimed container is never without its labels. */
  async set(name: string, labels: Record<string, string>): Promise<void> {
    mkdirSync(this.#dir, { recursive: true });
    const tmp = `${this.#file(name)}.${process.pid}`;
    writeFileSync(tmp, JSON.stringify(labels));
    renameSync(tmp, this.#file(name));
  }

  async remove(name: string): Promise<void> {
    await rm(this.#file(name), { force: true });
  }
}
