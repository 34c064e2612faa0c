/**
 * The cap on running sandboxes (`maxRunning`), counted on the engine: every process using the
 * same engine and `containerPrefix` counts the same containers (running ones named like a
 * thread's sandbox; warm containers are not sandboxes until claimed), so the cap holds across
 * processes, not just in one. A sandbox is admitted before it is started (created, claimed, or
 * started again after a pause or the idle reaper):
 *
 * - `reject`: at the cap, CAPACITY_EXCEEDED;
 * - `lru`: the running sandboxes idle longest (sandboxd's own idle time) are stopped to make
 *   room, each only if nothing runs in it at that moment (sandboxd drains itself, as for the
 *   idle reaper: a call racing the stop is sent again on the restarted sandbox); when every
 *   one has work in flight, CAPACITY_EXCEEDED.
 *
 * Two processes may both find room for the last place and both start. So after a start the
 * running sandboxes are counted again, and when there are too many those started last give way
 * (their start time on the engine orders them the same way for every process): the loser stops
 * what it started and fails with CAPACITY_EXCEEDED. In `lru` mode others are stopped first.
 */
import type { HealthResponse } from "@sandpit/sandboxd/protocol";
import { SandboxError } from "../../errors.ts";
import type { Logger } from "../../logger.ts";
import type { ContainerInfo, ContainerRuntime, ContainerSummary } from "./runtime.ts";

export interface CapacityHost {
  readonly maxRunning: number;
  readonly onCapacity: "reject" | "lru";
  readonly containerPrefix: string;
  readonly logger?: Logger | undefined;
  /** Stops `c` if nothing runs in it and nothing has for `minIdleMs`; whether it did. */
  drainIfIdle(c: ContainerInfo, minIdleMs: number): Promise<boolean>;
  /** sandboxd's /healthz, null when it does not answer. */
  health(c: ContainerInfo): Promise<HealthResponse | null>;
}

/** Counts and evictions made for one admission before it gives up (others keep starting). */
const ROUNDS = 3;

export class RunningCap {
  readonly #h: CapacityHost;
  readonly #sandboxName: RegExp;

  constructor(host: CapacityHost) {
    this.#h = host;
    const prefix = host.containerPrefix.replace(/[.]/g, "\\.");
    // A thread's sandbox (./index.ts containerName): not a warm one, nor another prefix's.
    this.#sandboxName = new RegExp(`^${prefix}-[0-9a-f]{16}$`);
  }

  /** Makes room for `name` to start, or throws CAPACITY_EXCEEDED. */
  async admit(rt: ContainerRuntime, name: string): Promise<void> {
    const max = this.#h.maxRunning;
    if (max === 0) return;
    for (let round = 0; round < ROUNDS; round++) {
      const others = (await this.running(rt)).filter((c) => c.name !== name);
      const excess = others.length + 1 - max;
      if (excess <= 0) return;
      if (this.#h.onCapacity === "reject") throw this.full(others.length);
      if ((await this.evict(rt, others, excess)) < excess) throw this.busy(others.length);
    }
    throw this.full(max);
  }

  /**
   * After `name` started: when more than the cap run now (another process started one at the
   * same time), in `lru` mode stops others; if still too many and `name` is among those started
   * last, calls `giveWay` (which stops it) and throws CAPACITY_EXCEEDED.
   */
  async settle(rt: ContainerRuntime, name: string, giveWay: () => Promise<void>): Promise<void> {
    const max = this.#h.maxRunning;
    if (max === 0) return;
    const running = await this.running(rt);
    let excess = running.length - max;
    if (excess <= 0) return;
    if (this.#h.onCapacity === "lru")
      excess -= await this.evict(
        rt,
        running.filter((c) => c.name !== name),
        excess,
      );
    if (excess <= 0) return;
    const started = (await Promise.all(running.map((c) => rt.inspect(c.name))))
      .filter((c): c is ContainerInfo => !!c?.running)
      .sort(
        (a, b) =>
          (a.startedAt?.getTime() ?? 0) - (b.startedAt?.getTime() ?? 0) ||
          a.name.localeCompare(b.name),
      );
    const rank = started.findIndex((c) => c.name === name);
    if (rank < 0 || rank < started.length - excess) return;
    this.#h.logger?.info(
      { container: name, running: started.length, maxRunning: max },
      "started together with another sandbox over the cap: this one gives way",
    );
    await giveWay();
    throw this.full(started.length - 1);
  }

  /** Running sandboxes, from one engine call. */
  private async running(rt: ContainerRuntime): Promise<ContainerSummary[]> {
    return (await rt.summaries(`${this.#h.containerPrefix}-`)).filter(
      (c) =>
        c.running && this.#sandboxName.test(c.name) && c.labels["sandpit.dev/managed"] === "true",
    );
  }

  /**
   * Stops up to `wanted` of `candidates`, those idle longest first, each only if nothing runs
   * in it right now; how many it stopped.
   */
  private async evict(
    rt: ContainerRuntime,
    candidates: ContainerSummary[],
    wanted: number,
  ): Promise<number> {
    const infos = (await Promise.all(candidates.map((c) => rt.inspect(c.name)))).filter(
      (c): c is ContainerInfo => !!c?.running,
    );
    const idle = await Promise.all(
      infos.map(async (c) => ({ c, idleMs: (await this.#h.health(c))?.idleMs ?? -1 })),
    );
    let stopped = 0;
    for (const { c, idleMs } of idle.sort((a, b) => b.idleMs - a.idleMs)) {
      if (stopped >= wanted) break;
      if (idleMs < 0) continue; // its sandboxd does not answer: it cannot drain either
      if (await this.#h.drainIfIdle(c, 0)) {
        stopped++;
        this.#h.logger?.info(
          { container: c.name, idleMs, maxRunning: this.#h.maxRunning },
          "stopped the least recently used sandbox to make room",
        );
      }
    }
    return stopped;
  }

  private full(running: number): SandboxError {
    return new SandboxError(
      `${running} Docker sandboxes are running, the cap (maxRunning) is ${this.#h.maxRunning}: pause or kill one, or set onCapacity: "lru"`,
      "CAPACITY_EXCEEDED",
    );
  }

  private busy(running: number): SandboxError {
    return new SandboxError(
      `${running} Docker sandboxes are running (maxRunning ${this.#h.maxRunning}) and too many of them have work in flight to make room by stopping the least recently used`,
      "CAPACITY_EXCEEDED",
    );
  }
}
