/** What every benchmark reports besides its numbers: the machine, the commit, the raw results file. */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs/promises";
import os from "node:os";
import { dirname } from "node:path";

export function hostInfo() {
  return {
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? "unknown",
    totalMemBytes: os.totalmem(),
    node: process.version,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
  };
}

/** The commit measured, marked when the code under test (runtime/, sdk/) had local edits. */
export function commitMeasured(): string | null {
  const git = spawnSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" });
  if (git.status !== 0) return null;
  const dirty = spawnSync("git", ["status", "--porcelain", "--", "sandboxd", "sdk"], {
    encoding: "utf8",
  });
  return `${git.stdout.trim()}${dirty.stdout.trim() ? " (sandboxd/ or sdk/ modified)" : ""}`;
}

/** Writes a benchmark's raw results (bench/results/<name>.json), which bench/RESULTS.md cites. */
export async function writeResults(file: string, record: Record<string, unknown>): Promise<void> {
  await fs.mkdir(dirname(file), { recursive: true });
  await fs.writeFile(file, JSON.stringify(record, null, 2) + "\n");
}

/** One goal row, as every part writes it into its results file (`headline`), for
 * the table bench/src/headline.ts prints. */
export interface HeadlineRow {
  metric: string;
  value: string;
  floor: string;
  ratio: number | null;
  goal: string;
  met: boolean;
}
