/**
 * A CPU-starved sandboxd, on purpose: every child spawned once this is on holds the event loop
 * busy right after its exit is seen, until `marker` exists (the child's late output is in the
 * pipe) and the pipe grace is long over. The drain tests (./process-drain.test.ts,
 * ./exit-drain.test.ts) prove no output is lost to such a loop.
 */
import { existsSync } from "node:fs";
import { PIPE_GRACE_MS } from "../src/process.ts";

const cp = process.getBuiltinModule("node:child_process");
const spawn = cp.spawn;

/** Holds the loop after each child's exit until `marker` exists; returns what turns it off. */
export function holdLoopAfterExits(marker: string): () => void {
  cp.spawn = ((...args: Parameters<typeof spawn>) => {
    const child = spawn(...args);
    child.once("exit", () =>
      process.nextTick(() => {
        const until = performance.now() + PIPE_GRACE_MS * 3;
        while (!existsSync(marker) || performance.now() < until) {
          // busy, as a CPU-starved sandboxd is
        }
      }),
    );
    return child;
  }) as typeof spawn;
  return () => {
    cp.spawn = spawn;
  };
}
