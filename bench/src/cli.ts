/**
 * CLI wall time: `sandpit exec <id> true` as published (cli/dist over the SDK built and installed
 * from its packed tarball), a fresh process each time as a person or a script runs it, on the
 * local provider and on the docker provider, against `docker exec <container> true` into the
 * same sandbox container in the same run, and against two more floors: a bare `node -e 0` and
 * `sandpit --version` (Node, commander, the command tree; no SDK). Runs are interleaved (the first
 * case rotates each round) so drift hits all alike. Needs a Docker engine: one that answers is
 * used, else dockerd is started as the docker test setup does and stopped again after. Prints a
 * Markdown table on stdout (progress on stderr) and writes bench/results/cli.json.
 *
 *   node bench/src/cli.ts [--runs 30]       (from the repository root)
 */
import { execFileSync, spawnSync } from "node:child_process";
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { packWorkspace } from "../../scripts/pack.ts";
import { ensureDocker } from "../../test/docker/dockerd.ts";
import { ensureTestImage } from "../../test/docker/test-image.ts";
import { commitMeasured, hostInfo, writeResults } from "./report.ts";
import { percentile } from "./stats.ts";

const { values } = parseArgs({ options: { runs: { type: "string", default: "30" } } });
const WARMUP = 3;
const RUNS = Number(values.runs);
const REPO = fileURLToPath(new URL("../../", import.meta.url));
const RESULTS_FILE = join(REPO, "bench", "results", "cli.json");

const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);

/**
 * The CLI as a user gets it, in `dir`: the SDK's packed tarball unpacked as
 * node_modules/@sandpit/sdk (its dist, its published manifest), cli/dist with its package.json
 * as node_modules/@sandpit/cli, and every other package linked from the repository's
 * node_modules (same versions as the lockfile's). Returns the CLI's entry point.
 */
async function installCli(dir: string): Promise<string> {
  const modules = join(dir, "node_modules");
  mkdirSync(join(modules, "@sandpit"), { recursive: true });
  const tarball = await packWorkspace("sdk", dir); // builds the SDK first
  const sdk = join(modules, "@sandpit", "sdk");
  mkdirSync(sdk);
  execFileSync("tar", ["-xzf", tarball, "-C", sdk, "--strip-components=1"]);
  execFileSync("npm", ["run", "build"], { cwd: join(REPO, "cli"), stdio: ["ignore", 2, 2] });
  const cli = join(modules, "@sandpit", "cli");
  cpSync(join(REPO, "cli", "dist"), join(cli, "dist"), { recursive: true });
  cpSync(join(REPO, "cli", "package.json"), join(cli, "package.json"));
  const repoModules = join(REPO, "node_modules");
  for (const name of readdirSync(repoModules)) {
    if (name === "@sandpit" || name === ".bin") continue;
    symlinkSync(join(repoModules, name), join(modules, name));
  }
  for (const name of readdirSync(join(repoModules, "@sandpit"))) {
    if (name === "sdk" || name === "cli") continue;
    symlinkSync(join(repoModules, "@sandpit", name), join(modules, "@sandpit", name));
  }
  return join(cli, "dist", "main.js");
}

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

const dir = mkdtempSync(join(os.tmpdir(), "sandpit-bench-cli-"));
const node = process.execPath;
const engine = await ensureDocker({ log });
const sandboxes: { id: string; env: NodeJS.ProcessEnv }[] = [];
let main = "";
try {
  const { tag } = await ensureTestImage({ log });
  main = await installCli(join(dir, "app"));
  const config = join(dir, "sandpit.yaml");
  writeFileSync(
    config,
    [
      "sandbox:",
      "  use: local",
      "  local:",
      `    baseDir: ${join(dir, "local")}`,
      "  docker:",
      `    image: ${tag}`,
      `    socketPath: ${engine.socketPath}`,
      "    containerPrefix: sandpit-bench",
      `    stateDir: ${join(dir, "docker")}`,
      "",
    ].join("\n"),
  );
  // The CLI's cache (its exec tickets and Node's compile cache) in the bench's directory: the
  // warm-up rounds' first exec of each sandbox goes through the provider and leaves the ticket
  // the recorded rounds use, as a person's repeated `sandpit exec` does.
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    SANDPIT_CONFIG: config,
    XDG_CACHE_HOME: join(dir, "cache"),
  };
  delete env.SANDPIT_PROVIDER;
  const dockerEnv = { ...env, SANDPIT_PROVIDER: "docker" };
  const create = (e: NodeJS.ProcessEnv) => {
    const r = spawnSync(node, [main, "create"], { env: e, encoding: "utf8" });
    if (r.status !== 0) throw new Error(`sandpit create failed: ${r.stderr}`);
    const id = r.stdout.trim();
    sandboxes.push({ id, env: e });
    return id;
  };
  const local = create(env);
  const docker = create(dockerEnv);
  log(`sandboxes: local ${local}, docker ${docker}; image ${tag}`);

  const cases: Record<string, { argv: string[]; env: NodeJS.ProcessEnv }> = {
    "docker exec <c> true": { argv: ["docker", "exec", docker, "true"], env },
    "sandpit exec <id> true (docker provider)": {
      argv: [node, main, "exec", docker, "--", "true"],
      env: dockerEnv,
    },
    "sandpit exec <id> true (local provider)": {
      argv: [node, main, "exec", local, "--", "true"],
      env,
    },
    "sandpit --version": { argv: [node, main, "--version"], env },
    "node -e 0": { argv: [node, "-e", "0"], env },
  };
  const samples: Record<string, number[]> = Object.fromEntries(
    Object.keys(cases).map((k) => [k, []]),
  );
  const started = Date.now();
  const loadStart = os.loadavg()[0]!;
  for (let i = 0; i < WARMUP + RUNS; i++) {
    // Rotate which case goes first so none always runs on a warmer cache.
    const names = Object.keys(cases);
    const order = [...names.slice(i % names.length), ...names.slice(0, i % names.length)];
    for (const name of order) {
      const ms = timed(cases[name]!.argv, cases[name]!.env);
      if (i >= WARMUP) samples[name]!.push(ms);
    }
    if (i % 10 === 0) log(`round ${i + 1}/${WARMUP + RUNS}`);
  }
  const loadEnd = os.loadavg()[0]!;

  const stats = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, percentiles(v)]));
  const floor = stats["docker exec <c> true"]!;
  const fmt = (p: { p50: number; p95: number; p99: number }) =>
    `${p.p50.toFixed(1)} / ${p.p95.toFixed(1)} / ${p.p99.toFixed(1)}`;
  const ratio = (name: string) => `${(stats[name]!.p50 / floor.p50).toFixed(2)}x`;
  const lines = [
    `| Command (wall time, fresh process) | p50 / p95 / p99 (ms, N=${RUNS}) | p50 / \`docker exec\` p50 |`,
    "| --- | ---: | ---: |",
    ...Object.entries(stats).map(([k, v]) => `| \`${k}\` | ${fmt(v)} | ${ratio(k)} |`),
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
  process.stdout.write(
    `\nload average (1 min): ${loadStart.toFixed(2)} at the start, ${loadEnd.toFixed(2)} at the end\n`,
  );
  await writeResults(RESULTS_FILE, {
    benchmark: "cli",
    ranAt: new Date(started).toISOString(),
    durationS: (Date.now() - started) / 1000,
    commit: commitMeasured(),
    host: hostInfo(),
    loadAverage: { start: loadStart, end: loadEnd },
    image: tag,
    results: stats,
    headline: (["docker", "local"] as const).map((p) => {
      const name = `sandpit exec <id> true (${p} provider)`;
      const r = stats[name]!.p50 / floor.p50;
      return {
        metric: `CLI \`sandpit exec <id> true\` wall time, ${p} provider, p50`,
        value: `${stats[name]!.p50.toFixed(1)} ms`,
        floor: `${floor.p50.toFixed(1)} ms (\`docker exec <c> true\`)`,
        ratio: Number(r.toFixed(2)),
        goal: "≤ 1x docker exec",
        met: r <= 1,
      };
    }),
  });
} finally {
  for (const s of sandboxes) spawnSync(node, [main, "rm", s.id], { env: s.env });
  rmSync(dir, { recursive: true, force: true });
  await engine.stop();
}
