#!/usr/bin/env node
/**
 * @sandpit/sdk as installed from its packed tarball into a project outside the repository
 * (test/consumer's project): how long a fresh Node process takes to import it, against a bare
 * `node -e 0` measured interleaved in the same run, and how much it installs with no optional
 * provider SDK, and with all of them.
 *
 *   node bench/src/sdk-package.ts [--runs 20] [--node 24.21.0]
 */
import { execFile, execFileSync } from "node:child_process";
import { readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { promisify } from "node:util";
import { ensureNode, NODE_VERSIONS } from "../../test/consumer/node-versions.ts";
import { makeConsumer, packTarballs } from "../../test/consumer/project.ts";
import { summarize } from "./stats.ts";

const run = promisify(execFile);
const { values } = parseArgs({
  options: { runs: { type: "string", default: "20" }, node: { type: "string" } },
});
const RUNS = Number(values.runs);

async function bytesUnder(dir: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true }))
    if (e.isFile()) total += (await stat(join(e.parentPath, e.name))).size;
  return total;
}

/** Installed packages (any depth) and their bytes, from `npm ls` and the files on disk. */
async function installed(dir: string): Promise<{ packages: number; bytes: number }> {
  const ls = execFileSync("npm", ["ls", "--all", "--parseable"], { cwd: dir, encoding: "utf8" });
  return {
    packages: ls.split("\n").filter((l) => l.includes("node_modules")).length,
    bytes: await bytesUnder(join(dir, "node_modules")),
  };
}

async function timeNode(node: string, cwd: string, script: string): Promise<number> {
  const t0 = performance.now();
  await run(node, ["-e", script], { cwd });
  return performance.now() - t0;
}

const MiB = (b: number) => (b / 2 ** 20).toFixed(1);
const ms = (n: number) => n.toFixed(1);

const version = values.node ?? NODE_VERSIONS[1];
const node = await ensureNode(version);
const tarballs = await packTarballs(["sdk"]);
const tarball = (await stat(tarballs[0]!)).size;
const bare = await makeConsumer(node, tarballs);
const full = await makeConsumer(node, [
  ...tarballs,
  "e2b@2.51.0",
  "@e2b/code-interpreter@2.8.0",
  "@daytonaio/sdk@0.218.0",
  "dockerode@4.0.8",
]);

// The SDK's dependencies alone, to say where its import time goes. Only zod loads with the SDK;
// undici loads with a provider's first request to a sandboxd, yaml with the first config file.
const cases = {
  floor: "0",
  import: "import('@sandpit/sdk')",
  require: "require('@sandpit/sdk')",
  zod: "import('zod')",
  undici: "import('undici')",
  yaml: "import('yaml')",
} as const;
const samples = Object.fromEntries(Object.keys(cases).map((k) => [k, [] as number[]])) as Record<
  keyof typeof cases,
  number[]
>;
for (const script of Object.values(cases)) await timeNode(node, bare.dir, script); // warm
for (let i = 0; i < RUNS; i++)
  for (const [name, script] of Object.entries(cases) as [keyof typeof cases, string][])
    samples[name].push(await timeNode(node, bare.dir, script));

const floor = summarize(samples.floor);
console.log(`Node ${version}, ${RUNS} fresh processes each, interleaved (ms)\n`);
console.log("| process | p50 | p99 | p50 minus floor | ratio to floor (p50) |");
console.log("| --- | ---: | ---: | ---: | ---: |");
for (const name of Object.keys(cases) as (keyof typeof cases)[]) {
  const s = summarize(samples[name]);
  console.log(
    `| \`node -e "${cases[name]}"\` | ${ms(s.p50)} | ${ms(s.p99)} | ${ms(s.p50 - floor.p50)} | ${(s.p50 / floor.p50).toFixed(2)}x |`,
  );
}
const b = await installed(bare.dir);
const f = await installed(full.dir);
console.log(`\ntarball: ${(tarball / 1024).toFixed(0)} KiB`);
console.log("| install | packages | node_modules (MiB) |");
console.log("| --- | ---: | ---: |");
console.log(`| @sandpit/sdk alone (no optional provider) | ${b.packages} | ${MiB(b.bytes)} |`);
console.log(
  `| with e2b, @e2b/code-interpreter, @daytonaio/sdk, dockerode | ${f.packages} | ${MiB(f.bytes)} |`,
);

for (const dir of [bare.dir, full.dir, join(tarballs[0]!, "..")])
  await rm(dir, { recursive: true, force: true });
