/** Writes a benchmark's raw results (bench/results/<name>.json), which bench/RESULTS.md cites. */
import * as fs from "node:fs/promises";
import { dirname } from "node:path";

export async function writeResults(file: string, record: Record<string, unknown>): Promise<void> {
  await fs.mkdir(dirname(file), { recursive: true });
  await fs.writeFile(file, JSON.stringify(record, null, 2) + "\n");
}
