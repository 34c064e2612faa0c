/**
 * A Python interpreter started ahead of the next code cell. A cell without a context starts a
 * fresh interpreter, and its start-up (the site module, the encodings, the runner's imports) is
 * most of a short cell's time: 20–80 ms, against a few for running `print(1)`. sandboxd keeps one
 * interpreter started and waiting (sandboxd/runners/python_runner.py, `--spare`), and hands it
 * the next cell over its stdin; a new one is started once that cell is done, and the first once
 * sandboxd has answered its first request (so it never slows sandboxd's own start).
 *
 * A cell runs in the spare only when the spare is what a fresh start would have made:
 * - every variable an interpreter reads while starting (STARTUP_VARS) is the same in the
 *   spare's environment and the cell's; the rest of the cell's environment, and its working
 *   directory, replace the spare's before the cell runs;
 * - what start-up read from disk has not changed since: the runner compares the site and
 *   sys.path directories again and, if one changed (a package installed, a .pth file written),
 *   declines the cell, which then starts fresh (as it does when one changed just before the
 *   spare started: python_runner.py).
 * The cost: one idle interpreter per sandbox (~10 MiB), counted in the sandbox's own limits.
 */
import type { ChildProcessWithoutNullStreams } from "node:child_process";
import { spawnDetached } from "./process.ts";

/** Variables read while an interpreter starts: they decide what the spare already is. */
const STARTUP_VARS =
  /^(PYTHON\w*|LC_\w+|LANG|LANGUAGE|HOME|TZ|PATH|LD_\w+|MALLOC_\w+|GLIBC_TUNABLES)$/;

/** The runner's exit status when it declined a cell (python_runner.py, STALE_EXIT). */
export const STALE_EXIT = 75;

/** How a spare is started: the interpreter, the runner and its `--spare`, the sandbox's environment now. */
export interface SpareLaunch {
  file: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
}

export class SpareRunner {
  readonly #launch: () => Promise<SpareLaunch>;
  #child: ChildProcessWithoutNullStreams | undefined;
  #startup = "";
  #filling: Promise<void> | undefined;
  #closed = false;
  /** Counts renew() calls, so a launch worked out across one is worked out again. */
  #renewals = 0;

  /** `launch` says how to start one now. */
  constructor(launch: () => Promise<SpareLaunch>) {
    this.#launch = launch;
  }

  /** Starts a spare unless one is there or on its way. Never throws: without one, cells start fresh. */
  fill(): void {
    if (this.#child || this.#filling || this.#closed) return;
    this.#filling = this.#start().finally(() => (this.#filling = undefined));
  }

  async #start(): Promise<void> {
    let launch: SpareLaunch | undefined;
    // The environment may change while the launch is worked out (a /v1/init): then again, so
    // the spare never starts with the old one. From the spawn on, renew() sees it.
    for (let tries = 0; !launch && tries < 3; tries++) {
      const asked = this.#renewals;
      launch = await this.#launch().catch(() => undefined);
      if (!launch || this.#closed) return;
      if (asked !== this.#renewals) launch = undefined;
    }
    if (!launch) return;
    // The runner is told when it started (python_runner.py: a directory changed since then may
    // have raced its start-up).
    const args = [...launch.args, String(Date.now())];
    const child = spawnDetached(launch.file, args, { cwd: launch.cwd, env: launch.env });
    const gone = () => {
      if (this.#child === child) this.#child = undefined;
    };
    // A spare that cannot start, or dies while waiting (the OOM killer, a `pkill python`), is
    // simply no longer there: the next cell starts fresh, and the one after gets a new spare.
    child.once("error", () => {
      gone();
      this.#closed = true; // no Python to start: cells report that themselves
    });
    child.once("exit", gone);
    child.stdin.on("error", () => undefined);
    // Its output is left unread until a cell is handed over: anything start-up printed (a broken
    // .pth file's message) is then the cell's, as it would be from a fresh start.
    this.#child = child;
    this.#startup = startupKey(launch.env);
  }

  /**
   * The spare, now the caller's to run (it stops being spare), when it started with `env`'s
   * start-up variables; otherwise undefined and the spare stays for a later cell.
   */
  take(env: Record<string, string>): ChildProcessWithoutNullStreams | undefined {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return undefined;
    if (startupKey(env) !== this.#startup) return undefined;
    this.#child = undefined;
    return child;
  }

  /**
   * The sandbox's environment is now `env`: a spare that started with other start-up variables
   * would be declined by every cell, so it is let go and a new one started.
   */
  renew(env: Record<string, string>): void {
    this.#renewals++;
    if (!this.#child || startupKey(env) === this.#startup) return;
    this.#letGo();
    this.fill();
  }

  /**
   * Lets the spare go: what start-up reads from disk has just changed (packages installed), so
   * it would decline the next cell, and one started now would too (python_runner.py,
   * UNSURE_NS). The next cell starts fresh, and a new spare after it.
   */
  discard(): void {
    this.#letGo();
  }

  /** Lets the spare go for good (sandboxd stops). */
  close(): void {
    this.#closed = true;
    this.#letGo();
  }

  #letGo(): void {
    const child = this.#child;
    this.#child = undefined;
    // An end of stdin without a cell is the runner's sign to exit.
    child?.stdin.end();
  }
}

function startupKey(env: Record<string, string>): string {
  return JSON.stringify(
    Object.keys(env)
      .filter((k) => STARTUP_VARS.test(k))
      .sort()
      .map((k) => [k, env[k]]),
  );
}
