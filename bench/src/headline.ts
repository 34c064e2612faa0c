/**
 * The headline table: every benchmark part's goal rows, each with its same-run floor, the ratio,
 * the goal and whether this run met it.
 *
 *   npm run bench                       runs every part, one after another, then the table
 *   npm run bench -- --only local,docker   runs those parts, then the table (other parts' rows
 *                                        come from their last results file)
 *   npm run bench -- --report           the table from the results files, running nothing
 *
 * Each part is a script of its own (`node_modules/.bin/node bench/src/<part>.ts`) that can run
 * alone; it writes bench/results/<file>.json with a `headline` array. This script runs the parts
 * as child processes (so one part's memory or leftovers never skew the next), reads those
 * arrays, prints the table and writes it into bench/RESULTS.md between the headline markers.
 */
import { spawnSync } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as prettier from "prettier";
import type { HeadlineRow } from "./report.ts";

interface Part {
  /** Name used by `--only`. */
  name: string;
  /** The script and its arguments, relative to the repository root. */
  args: string[];
  /** Results files (bench/results/) holding its headline rows. */
  results: string[];
  /** What it needs, said before it starts. */
  needs: string;
}

/** In the order they run: host-only parts first, the cluster last (it is brought up once). */
const PARTS: Part[] = [
  {
    name: "sandboxd-start",
    args: ["bench/src/sandboxd-start.ts"],
    results: ["sandboxd-start.json"],
    needs: "nothing but Node",
  },
  { name: "local", args: ["bench/src/local.ts"], results: ["local.json"], needs: "bubblewrap" },
  {
    name: "docker",
    args: ["bench/src/docker.ts"],
    results: ["docker.json"],
    needs: "root (starts dockerd)",
  },
  {
    name: "provisioner",
    args: ["bench/src/provisioner.ts"],
    results: ["provisioner.json"],
    needs: "root (brings the test cluster up)",
  },
  {
    name: "operator",
    args: ["bench/src/operator.ts"],
    results: ["operator.json"],
    needs: "root (brings the test cluster up), about 30 min",
  },
];

const root = fileURLToPath(new URL("../..", import.meta.url));
const resultsDir = join(root, "bench", "results");
const START = "<!-- headline:start -->";
const END = "<!-- headline:end -->";

function parseArgs(argv: string[]): { report: boolean; only: Set<string> | undefined } {
  const report = argv.includes("--report");
  const i = argv.indexOf("--only");
  if (i >= 0 && !argv[i + 1]) throw new Error("--only needs a comma-separated list of parts");
  const only = i >= 0 ? new Set(argv[i + 1]!.split(",").filter(Boolean)) : undefined;
  const known = new Set(PARTS.map((p) => p.name));
  for (const name of only ?? []) {
    if (!known.has(name))
      throw new Error(`unknown part ${name}; the parts are: ${[...known].join(", ")}`);
  }
  return { report, only };
}

async function rowsOf(part: Part): Promise<{ rows: HeadlineRow[]; missing: string[] }> {
  const rows: HeadlineRow[] = [];
  const missing: string[] = [];
  for (const file of part.results) {
    let parsed: { headline?: HeadlineRow[]; commit?: string; date?: string };
    try {
      parsed = JSON.parse(await readFile(join(resultsDir, file), "utf8"));
    } catch {
      missing.push(`${file} (not run yet)`);
      continue;
    }
    if (!Array.isArray(parsed.headline)) missing.push(`${file} (no headline rows)`);
    else rows.push(...parsed.headline);
  }
  return { rows, missing };
}

const cell = (s: string) => s.replaceAll("|", "\\|");

function table(rows: Array<HeadlineRow & { part: string }>): string {
  const lines = [
    "| Part | Metric | This run | Floor (same run) | Ratio | Goal | |",
    "|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.part} | ${cell(r.metric)} | ${cell(r.value)} | ${cell(r.floor)} | ` +
        `${r.ratio === null ? "–" : `${r.ratio.toFixed(2)}x`} | ${cell(r.goal)} | ` +
        `${r.met ? "met" : "**missed**"} |`,
    ),
  ];
  return lines.join("\n");
}

async function main() {
  const { report, only } = parseArgs(process.argv.slice(2));
  const failed: string[] = [];
  if (!report) {
    for (const part of PARTS) {
      if (only && !only.has(part.name)) continue;
      process.stderr.write(`[bench] ${part.name}: needs ${part.needs}\n`);
      const run = spawnSync(process.execPath, part.args, { cwd: root, stdio: "inherit" });
      if (run.status !== 0) failed.push(`${part.name} (exit ${run.status ?? run.signal})`);
    }
  }
  const all: Array<HeadlineRow & { part: string }> = [];
  const missing: string[] = [];
  for (const part of PARTS) {
    const got = await rowsOf(part);
    all.push(...got.rows.map((r) => ({ ...r, part: part.name })));
    missing.push(...got.missing.map((m) => `${part.name}: ${m}`));
  }
  const met = all.filter((r) => r.met).length;
  const summary =
    `${met} of ${all.length} goals met` +
    (missing.length ? `; no rows from ${missing.join(", ")}` : "") +
    (failed.length ? `; parts that failed this run: ${failed.join(", ")}` : "") +
    ".";
  const body = `${table(all)}\n\n${summary}`;
  process.stdout.write(`${body}\n`);

  const resultsMd = join(root, "bench", "RESULTS.md");
  const md = await readFile(resultsMd, "utf8");
  const section =
    `${START}\n## Headline\n\nEvery part's goal rows, each from its part's last run (its section ` +
    `below gives the command, the load and the commit). Written by \`npm run bench\` ` +
    `(\`--report\` rewrites it from bench/results/ without running anything).\n\n${body}\n${END}`;
  const at = md.indexOf(START);
  const next =
    at >= 0
      ? md.slice(0, at) + section + md.slice(md.indexOf(END, at) + END.length)
      : md.replace(/\n## /, `\n${section}\n\n## `);
  // Formatted as the repository formats it (`npm run lint` checks this file too).
  const options = (await prettier.resolveConfig(resultsMd)) ?? {};
  await writeFile(resultsMd, await prettier.format(next, { ...options, filepath: resultsMd }));
  if (failed.length) process.exitCode = 1;
}

try {
  await main();
} catch (err) {
  // Bad flags are the caller's mistake: say so, without a stack trace.
  process.stderr.write(`bench: ${(err as Error).message}\n`);
  process.exitCode = 2;
}
