/**
 * Stopping a Docker sandbox only when nothing runs in it: the idle reaper and the `lru` cap ask
 * sandboxd to drain (DRAIN_PATH in @sandpit/sandboxd/protocol) instead of stopping the container
 * from outside. sandboxd checks that it is idle and, in the same step, starts refusing all work
 * and exits (status DRAINED_EXIT_CODE), which stops the container; so nothing that starts
 * between the decision and the stop can be cut, as it would be by a `docker stop` after a look
 * at /healthz. A call refused or cut off that way is sent again by the sandbox's client once the
 * container is started again (DockerSandbox.recover in ./index.ts).
 */
import { isSandboxError } from "../../errors.ts";
import type { Logger } from "../../logger.ts";
import { clientAt, health } from "./endpoint.ts";
import type { ContainerInfo, ContainerRuntime } from "./runtime.ts";
import type { TokenKeys } from "./tokens.ts";

/**
 * How long a drained sandboxd may take to exit and its container to stop (sandboxd exits within
 * 5 s whatever happens), and how often that is looked at.
 */
const STOP_WAIT_MS = 10_000;
const STOP_POLL_MS = 25;

interface DrainerOptions {
  runtime: () => Promise<ContainerRuntime>;
  tokens: TokenKeys;
  logger?: Logger | undefined;
}

export class Drainer {
  readonly #o: DrainerOptions;
  /** Containers whose sandboxd has no drain route, told once. */
  readonly #noDrain = new Set<string>();

  constructor(o: DrainerOptions) {
    this.#o = o;
  }

  /**
   * Stops a running container if nothing runs in it and nothing has for `minIdleMs`, and waits
   * for it to stop. False when it was busy, or is not this provider's to open (another state
   * directory's key), or its sandboxd cannot drain (an older image: it is not stopped from
   * outside either).
   */
  async drainIfIdle(c: ContainerInfo, minIdleMs: number): Promise<boolean> {
    const endpoint = c.endpoint;
    if (!endpoint) return false;
    const ask = async (token: string) => {
      const client = clientAt(endpoint, token);
      try {
        return (await client.drain(minIdleMs)).drained;
      } finally {
        await client.close();
      }
    };
    let drained: boolean;
    try {
      const tokens = await this.#o.tokens.of(c);
      drained = await ask(tokens.live).catch((err: unknown) => {
        // A claimed container started again and not yet handed its current token.
        if (isSandboxError(err, "UNAUTHORIZED") && tokens.boot !== tokens.live)
          return ask(tokens.boot);
        throw err;
      });
    } catch (err) {
      if (isSandboxError(err, "NOT_FOUND") && !this.#noDrain.has(c.name)) {
        this.#noDrain.add(c.name);
        this.#o.logger?.warn(
          { container: c.name },
          "its sandboxd cannot drain (an image older than this provider): not stopped when idle",
        );
      } else this.#o.logger?.debug({ err, container: c.name }, "could not ask sandboxd to drain");
      return false;
    }
    if (!drained) return false;
    const after = await this.whenStopped(c.name, true);
    if (after?.running)
      this.#o.logger?.warn({ container: c.name }, "a drained sandboxd did not exit in time");
    return true;
  }

  /**
   * Waits (a bounded while) for a container whose sandboxd drains, or may have, to stop; its
   * inspect at the end, null when it is gone. Unless `draining` is known, a running container
   * whose sandboxd answers and is not draining is returned at once: it is not stopping.
   */
  async whenStopped(name: string, draining: boolean): Promise<ContainerInfo | null> {
    const rt = await this.#o.runtime();
    const deadline = Date.now() + STOP_WAIT_MS;
    for (;;) {
      const info = await rt.inspect(name);
      if (!info?.running) return info;
      if (!draining) {
        const h = await health(info);
        if (h && !h.draining) return info;
      }
      if (Date.now() >= deadline) return info;
      await new Promise((r) => setTimeout(r, STOP_POLL_MS));
    }
  }
}
