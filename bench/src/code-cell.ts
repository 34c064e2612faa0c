/**
 * A stateless Python cell (`print(1)` on /v1/code/execute, no context) on one sandboxd started
 * from the sources, against the floor of starting a fresh interpreter for it
 * (`python3 -c "print(1)"` spawned by this process until it closes), interleaved: after each
 * cell, the floor, then a 150 ms pause, so sandboxd's spare interpreter
 * (sandboxd/src/spare-runner.ts) has started again before the next cell, as it has between an
 * agent's commands.
 *
 *   node_modules/.bin/node bench/src/code-cell.ts [--cells 30]   (printed; nothing is written)
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { SandboxdClient } from "@sandpit/sdk/sandboxd-client";
import { percentiles } from "./stats.ts";

const MAIN = fileURLToPath(new URL("../../sandboxd/src/main.ts", import.meta.url));
const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const { values } = parseArgs({
  options: { cells: { type: "string", default: "30" } },
});
const CELLS = Number(values.cells);
const GAP_MS = 150;
if (!Number.isInteger(CELLS) || CELLS < 1) throw new Error("--cells must be a positive integer");

/** `python3 -c "print(1)"` from spawn until its pipes close, in ms. */
function freshPython(): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const p = spawn("python3", ["-c", "print(1)"], { stdio: ["ignore", "pipe", "pipe"] });
    p.stdout.resume();
    p.stderr.resume();
    p.once("error", reject);
    p.once("close", (code) =>
      code === 0 ? resolve(performance.now() - t0) : reject(new Error(`exit ${code}`)),
    );
  });
}

const root = await mkdtemp(join(os.tmpdir(), "sandpit-bench-cell-"));
const token = randomBytes(32).toString("hex");
const child = spawn(process.execPath, [MAIN], {
  env: {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: root,
    LANG: "C.UTF-8",
    SANDBOXD_ROOT: root,
    SANDBOXD_LISTEN: "127.0.0.1:0",
    SANDBOXD_TOKEN: token,
    SANDBOXD_LOG_LEVEL: "error",
  },
  stdio: ["ignore", "pipe", "inherit"],
});
try {
  const line = await new Promise<string>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`sandboxd exited with ${code}`)));
    createInterface({ input: child.stdout! }).once("line", resolve);
  });
  const { port } = JSON.parse(line) as { port: number };
  const client = new SandboxdClient({ baseUrl: `http://127.0.0.1:${port}`, token });
  await client.health();
  const cell: number[] = [];
  const floor: number[] = [];
  for (let i = 0; i < CELLS + 3; i++) {
    await sleep(GAP_MS);
    const t0 = performance.now();
    const out = await client.executeCode({ language: "python", code: "print(1)" });
    const ms = performance.now() - t0;
    if (out.stdout !== "1\n") throw new Error(`print(1) gave ${JSON.stringify(out)}`);
    const f = await freshPython();
    if (i >= 3) {
      cell.push(ms);
      floor.push(f);
    }
  }
  await client.close();
  const c = percentiles(cell);
  const f = percentiles(floor);
  const fmt = (p: typeof c) => `${p.p50.toFixed(1)} / ${p.p95.toFixed(1)} / ${p.p99.toFixed(1)}`;
  log(`${CELLS} cells, ${GAP_MS} ms apart (after 3 unrecorded)`);
  process.stdout.write(
    `print(1) on /v1/code/execute, p50 / p95 / p99 ms: ${fmt(c)}\n` +
      `floor, python3 -c "print(1)" spawned here, p50 / p95 / p99 ms: ${fmt(f)}\n` +
      `cell / floor, p50: ${(c.p50 / f.p50).toFixed(2)}x\n`,
  );
} finally {
  child.kill("SIGTERM");
  await new Promise((r) => (child.exitCode === null ? child.once("exit", r) : r(undefined)));
  await rm(root, { recursive: true, force: true });
}
