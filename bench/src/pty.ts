/**
 * Terminal keystroke echo: one byte typed into a terminal running `cat` in raw mode (no echo by
 * the line discipline, so the byte comes back only once cat has read and written it), timed
 * from `sendInput` until `onData` sees it. The floor, measured alongside on the same sandbox and
 * interleaved sample by sample, is the SDK's cheapest HTTP round trip to sandboxd
 * (`filesystem.exists`: one request, one stat).
 *
 *  - local provider, isolation "none" and "bwrap" (sandboxd over a unix socket);
 *  - with --provisioner, also the kubernetes provider through the provisioner's proxy on the
 *    local test cluster (test/cluster): an operator and a provisioner on a fresh namespace, the
 *    sandbox image loaded into the cluster. Uses the shared Docker engine and cluster: run it
 *    under their lock.
 *
 *   node_modules/.bin/node bench/src/pty.ts [--provisioner]
 *
 * Prints a Markdown table, writes bench/results/pty.json and its section of bench/RESULTS.md.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { LocalProvider, type SandboxInstance, type SandboxProvider } from "@sandpit/sdk";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import { commitMeasured, hostInfo, writeResults } from "./report.ts";
import { summarize, type Summary } from "./stats.ts";

const WARMUP = 100;
const RUNS = 2000;
const GOALS = { local: 2, provisioner: 5 } as const;
const RESULTS_FILE = join(dirname(fileURLToPath(import.meta.url)), "..", "results", "pty.json");
const HEADING = "## Terminals: keystroke echo";

interface Row {
  target: string;
  echo: Summary & { p95: number };
  floor: Summary & { p95: number };
  goalP50Ms: number;
}

const log = (line: string) => process.stderr.write(`${line}\n`);

function withP95(samples: number[]): Summary & { p95: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  return { ...summarize(samples), p95: sorted[Math.ceil((95 * sorted.length) / 100) - 1]! };
}

/** Echo and floor samples on one sandbox, interleaved so drift hits both alike. */
async function measure(sbx: SandboxInstance): Promise<{ echo: number[]; floor: number[] }> {
  let waiting: { byte: number; resolve: () => void } | undefined;
  const term = await sbx.pty.create({
    cols: 80,
    rows: 24,
    command: "stty raw -echo && echo ready && exec cat",
    onData: (data) => {
      if (waiting && data.includes(waiting.byte)) {
        const w = waiting;
        waiting = undefined;
        w.resolve();
      }
    },
  });
  try {
    // "ready" is printed once the terminal is raw: from then on, every byte is cat's echo.
    await new Promise<void>((resolve) => {
      waiting = { byte: "y".charCodeAt(0), resolve };
    });
    const echo: number[] = [];
    const floor: number[] = [];
    const letters = "abcdefghijklmnopqrstuvwx";
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const byte = letters.charCodeAt(i % letters.length);
      const t0 = performance.now();
      await new Promise<void>((resolve) => {
        waiting = { byte, resolve };
        void term.sendInput(new Uint8Array([byte]));
      });
      const t1 = performance.now();
      await sbx.filesystem.exists("/mnt/user-data/workspace");
      const t2 = performance.now();
      if (i >= WARMUP) {
        echo.push(t1 - t0);
        floor.push(t2 - t1);
      }
    }
    return { echo, floor };
  } finally {
    await term.kill().catch(() => undefined);
  }
}

async function row(target: string, provider: SandboxProvider, goal: number): Promise<Row> {
  log(`${target}: creating a sandbox`);
  const sbx = await provider.create({ language: "python", threadId: `ptybench${Date.now()}` });
  try {
    const { echo, floor } = await measure(sbx);
    const r = { target, echo: withP95(echo), floor: withP95(floor), goalP50Ms: goal };
    log(`${target}: echo p50 ${r.echo.p50.toFixed(3)} ms, floor p50 ${r.floor.p50.toFixed(3)} ms`);
    return r;
  } finally {
    await sbx.kill().catch(() => undefined);
  }
}

async function local(): Promise<Row[]> {
  const rows: Row[] = [];
  for (const isolation of ["none", "bwrap"] as const) {
    const baseDir = await mkdtemp(join(tmpdir(), "sandpit-ptybench-"));
    const provider = new LocalProvider({ baseDir, isolation });
    try {
      rows.push(await row(`local (${isolation})`, provider, GOALS.local));
    } finally {
      await provider.close();
      await rm(baseDir, { recursive: true, force: true });
    }
  }
  return rows;
}

async function provisioner(): Promise<Row> {
  const { runningCluster, clusterImage } = await import("./kube.ts");
  const { startStack } = await import("../../test/cluster/harness.ts");
  const kubeconfig = await runningCluster();
  const image = await clusterImage();
  const key = randomBytes(24).toString("hex");
  const stack = await startStack({
    kubeconfig,
    image,
    prefix: "ptybench",
    keys: [{ key, tenant: "bench", maxSandboxes: 2 }],
  });
  try {
    const provider = new KubernetesProvider({ provisionerUrl: stack.prov.url, apiKey: key });
    return await row("kubernetes (through the provisioner)", provider, GOALS.provisioner);
  } finally {
    await stack.stop();
  }
}

function table(rows: Row[]): string {
  const f = (n: number) => n.toFixed(3);
  const lines = [
    "| target | echo p50 | p95 | p99 | floor p50 | p95 | p99 | echo/floor (p50) | goal p50 |",
    "| --- | --: | --: | --: | --: | --: | --: | --: | --: |",
  ];
  for (const r of rows) {
    const met = r.echo.p50 <= r.goalP50Ms ? "met" : "missed";
    lines.push(
      `| ${r.target} | ${f(r.echo.p50)} | ${f(r.echo.p95)} | ${f(r.echo.p99)} | ${f(r.floor.p50)} | ${f(r.floor.p95)} | ${f(r.floor.p99)} | ${(r.echo.p50 / r.floor.p50).toFixed(2)}x | ≤ ${r.goalP50Ms} ms (${met}) |`,
    );
  }
  return lines.join("\n");
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { provisioner: { type: "boolean", default: false } } });
  const rows = await local();
  if (values.provisioner) rows.push(await provisioner());
  const md = table(rows);
  process.stdout.write(`${md}\n`);
  await writeResults(RESULTS_FILE, {
    date: new Date().toISOString(),
    commit: commitMeasured(),
    host: hostInfo(),
    warmup: WARMUP,
    runs: RUNS,
    rows,
  });
  const { updateResultsMd } = await import("./kube.ts");
  await updateResultsMd(
    HEADING,
    `${HEADING}

\`node_modules/.bin/node bench/src/pty.ts${values.provisioner ? " --provisioner" : ""}\` (bench/src/pty.ts; raw numbers in bench/results/pty.json). One byte typed into \`cat\` on a raw-mode terminal, from \`sendInput\` until \`onData\` sees it come back, ${RUNS} samples after ${WARMUP} warm-up; the floor is \`filesystem.exists\` (one HTTP round trip to sandboxd, one stat) on the same sandbox, interleaved. Milliseconds.

${md}
`,
  );
}

await main();
process.exit(0);
