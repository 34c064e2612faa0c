/**
 * Where each Docker sandbox's sandboxd answers, and its token, kept on the host so a later
 * process (every `sandpit` invocation is one) reaches a known sandbox with no engine call at
 * all: no Docker client loaded, no ping, no inspect. One file per container in the provider's
 * state directory, beside the lifetime overrides (./lifetime.ts) and claimed labels
 * (./claimed-labels.ts), written whenever a process has reached the container through the engine.
 *
 * The token opens that one sandbox's sandboxd, as the container's own environment does (which
 * anyone who may talk to the engine can read), so the file is created 0600: readable by this
 * user only. It is only a hint: a record that no longer answers (the container was stopped,
 * removed or replaced, the port now someone else's) is passed over and written again by
 * whoever next reaches the container through the engine.
 */
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";

export interface SandboxdRecord {
  /** The container's endpoint as ContainerInfo gives it: "host:port" or "unix:/path". */
  endpoint: string;
  token: string;
  /** The end of its lifetime from its labels at the time (an override file still wins). */
  expiresAt?: string | undefined;
}

export class SandboxdRecords {
  readonly #dir: string;

  constructor(dir: string) {
    this.#dir = dir;
  }

  #file(name: string): string {
    return join(this.#dir, `${name}.sandboxd.json`);
  }

  async read(name: string): Promise<SandboxdRecord | null> {
    try {
      const r = JSON.parse(await readFile(this.#file(name), "utf8")) as Partial<SandboxdRecord>;
      return typeof r.endpoint === "string" && typeof r.token === "string"
        ? { endpoint: r.endpoint, token: r.token, expiresAt: r.expiresAt }
        : null;
    } catch {
      return null; // none yet, or not ours to trust
    }
  }

  /** Created 0600 under a temporary name, then renamed: never readable by others, never half. */
  async write(name: string, record: SandboxdRecord): Promise<void> {
    await mkdir(this.#dir, { recursive: true, mode: 0o700 });
    const tmp = `${this.#file(name)}.${process.pid}`;
    await rm(tmp, { force: true });
    await writeFile(tmp, JSON.stringify(record), { mode: 0o600, flag: "wx" });
    await rename(tmp, this.#file(name));
  }

  async remove(name: string): Promise<void> {
    await rm(this.#file(name), { force: true });
  }
}
