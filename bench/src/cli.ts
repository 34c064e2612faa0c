/**
 * CLI wall time: `sandpit exec <id> true` (local provider, a fresh process each time, as a person
 * or a script runs it) against `docker exec <container> true` in the same run when a Docker
 * engine answers, and always against two floors: a bare `node -e 0` and `sandpit --version` (the
 * CLI's own start: Node, type stripping, commander; no SDK). Runs are interleaved so drift hits
 * all alike. Prints a Markdown table on stdout (progress on stderr) and writes
 * bench/results/cli.json.
 *
 *   node bench/src/cli.ts        (from the repository root)
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { commitMeasured, hostInfo, writeResults } from "./report.ts";
import { percentile } from "./stats.ts";

const WARMUP = 3;
const RUNS = 30;
const HERE = dirname(fileURLToPath(import.meta.url));
const MAIN = join(HERE, "..", "..", "cli", "src", "main.ts");
const RESULTS_FILE = join(HERE, "..", "results", "cli.json");
const DIST_MAIN = join(HERE, "..", "..", "cli", "dist", "main.js");

const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);

function timed(argv: string[], env: NodeJS.ProcessEnv): number {
  const t0 = performance.now();
  const r = spawnSync(argv[0]!, argv.slice(1), { env, stdio: ["ignore", "ignore", "pipe"] });
  const ms = performance.now() - t0;
  if (r.status !== 0) throw new Error(`${argv.join(" ")} exited ${r.status}: ${r.stderr}`);
  return ms;
}

function percentiles(samples: number[]) {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
  };
}

/**
 * A running container for `docker exec`: BENCH_DOCKER_IMAGE, else a local Sandpit sandbox image
 * (no pull needed), running `sleep`. Or why there is none.
 */
function dockerContainer(): { id: string; image: string } | { missing: string } {
  const info = spawnSync("docker", ["info", "--format", "{{.ServerVersion}}"], {
    encoding: "utf8",
  });
  if (info.status !== 0) return { missing: "no Docker engine answered" };
  const images = spawnSync(
    "docker",
    ["image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "sandpit-sandbox"],
    {
      encoding: "utf8",
    },
  );
  const image = process.env.BENCH_DOCKER_IMAGE ?? images.stdout.split("\n").find(Boolean);
  if (!image) return { missing: "no sandpit-sandbox image (set BENCH_DOCKER_IMAGE)" };
  const run = spawnSync("docker", ["run", "-d", "--rm", "--entrypoint", "sleep", image, "3600"], {
    encoding: "utf8",
  });
  if (run.status !== 0) return { missing: `docker run ${image} failed: ${run.stderr.trim()}` };
  return { id: run.stdout.trim(), image };
}

const dir = mkdtempSync(join(os.tmpdir(), "sandpit-bench-cli-"));
const config = join(dir, "sandpit.yaml");
writeFileSync(config, `sandbox:\n  use: local\n  local:\n    baseDir: ${join(dir, "state")}\n`);
const env: NodeJS.ProcessEnv = { ...process.env, SANDPIT_CONFIG: config };
delete env.SANDPIT_PROVIDER;
const node = process.execPath;
const created = spawnSync(node, [MAIN, "create"], { env, encoding: "utf8" });
if (created.status !== 0) throw new Error(`sandpit create failed: ${created.stderr}`);
const id = created.stdout.trim();
const docker = dockerContainer();
log(`sandbox ${id}; docker: ${"id" in docker ? docker.id.slice(0, 12) : docker.missing}`);

const cases: Record<string, string[]> = {
  "sandpit exec <id> true": [node, MAIN, "exec", id, "--", "true"],
  // The CLI as published (tsc-built JavaScript; `npm run build -w cli` first). The SDK it
  // imports is still the workspace's TypeScript until its own build is what resolves.
  ...(existsSync(DIST_MAIN)
    ? { "sandpit exec (cli/dist) <id> true": [node, DIST_MAIN, "exec", id, "--", "true"] }
    : {}),
  "sandpit --version": [node, MAIN, "--version"],
  "node -e 0": [node, "-e", "0"],
  ...("id" in docker ? { "docker exec <c> true": ["docker", "exec", docker.id, "true"] } : {}),
};
const samples: Record<string, number[]> = Object.fromEntries(
  Object.keys(cases).map((k) => [k, []]),
);
const started = Date.now();
const load = os.loadavg()[0]!;
try {
  for (let i = 0; i < WARMUP + RUNS; i++) {
    // Rotate which case goes first so none always runs on a warmer cache.
    const names = Object.keys(cases);
    const order = [...names.slice(i % names.length), ...names.slice(0, i % names.length)];
    for (const name of order) {
      const ms = timed(cases[name]!, env);
      if (i >= WARMUP) samples[name]!.push(ms);
    }
    if (i % 10 === 0) log(`round ${i + 1}/${WARMUP + RUNS}`);
  }
} finally {
  spawnSync(node, [MAIN, "rm", id], { env });
  if ("id" in docker) spawnSync("docker", ["rm", "-f", docker.id]);
  rmSync(dir, { recursive: true, force: true });
}

const stats = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, percentiles(v)]));
const exec = stats["sandpit exec <id> true"]!;
const floor = stats["docker exec <c> true"] ?? stats["node -e 0"]!;
const floorName = stats["docker exec <c> true"] ? "docker exec <c> true" : "node -e 0";
const fmt = (p: { p50: number; p95: number; p99: number }) =>
  `${p.p50.toFixed(1)} / ${p.p95.toFixed(1)} / ${p.p99.toFixed(1)}`;
const lines = [
  `| Command (wall time, fresh process) | p50 / p95 / p99 (ms, N=${RUNS}) |`,
  "| --- | ---: |",
  ...Object.entries(stats).map(([k, v]) => `| \`${k}\` | ${fmt(v)} |`),
  `| ratio \`sandpit exec\` / \`${floorName}\`, p50 | ${(exec.p50 / floor.p50).toFixed(2)}x |`,
];
process.stdout.write(`${lines.join("\n")}\n`);
if (!("id" in docker)) process.stdout.write(`\nNo docker exec in this run: ${docker.missing}.\n`);
await writeResults(RESULTS_FILE, {
  benchmark: "cli",
  ranAt: new Date(started).toISOString(),
  durationS: (Date.now() - started) / 1000,
  commit: commitMeasured(),
  host: hostInfo(),
  loadAverageAtStart: load,
  docker: "id" in docker ? docker.image : docker.missing,
  results: stats,
});
