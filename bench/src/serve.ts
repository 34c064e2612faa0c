/**
 * `sandpit serve` on Docker against the Docker provider used directly, in one run:
 *  1. warm create -> first command done, each side with a warm pool of one, refilled before
 *     each sample. Through serve (`--warm 1`): `POST /v1/sandboxes` (waits for Ready) then
 *     `POST /v1/sandboxes/:id/proxy/v1/commands/run {command: "true"}`. Directly: a Docker
 *     provider with `warm: 1`, `create()` with labels shaped like serve's (its record), then
 *     `commands.run("true")`. Both claim a warm container (the provider keeps a claim's labels
 *     on the host). Interleaved (which goes first alternates); deletes untimed. Cold creates
 *     (no warm pool), through serve and directly, for reference.
 *  2. a command's round trip on one running sandbox: through serve's proxy, against the SDK's
 *     own client straight to sandboxd, interleaved.
 * Goal (issue 16): through serve ≤ 1.2x the direct p50 + 2 ms.
 *
 *   node bench/src/serve.ts        (from the repository root; builds the sandbox image from this
 *                                   checkout as the docker tests do, or SANDPIT_BENCH_IMAGE=<image>)
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { DockerProvider } from "@sandpit/sdk/docker";
import { ensureDocker } from "../../test/docker/dockerd.ts";
import { ensureTestImage } from "../../test/docker/test-image.ts";
import { call, KEYS, KEY_LIST, startServe } from "../../test/serve/harness.ts";
import { updateResultsMd } from "./kube.ts";
import { commitMeasured, hostInfo, writeResults } from "./report.ts";
import { summarize, type Summary } from "./stats.ts";

const PREFIX = "sandpit-bench-serve";
const CREATE_RUNS = 30;
const COLD_RUNS = 5;
/** serve's warm containers: the Docker provider's default prefix. */
const SERVE_WARM = "name=^sandpit-warm-";
/** After a refill, before a sample: the engine quiet again on both sides. */
const SETTLE_MS = 2_000;
const RTT_WARMUP = 30;
const RTT_RUNS = 300;
const run = promisify(execFile);
const now = () => performance.now();
const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);
const fresh = () => `bench-${randomBytes(6).toString("hex")}`;
const ms = (s: Summary) => `${s.p50.toFixed(2)} / ${s.p99.toFixed(2)} / ${s.max.toFixed(2)}`;

const LOAD_START = loadavg()[0]!;
const engine = await ensureDocker({ log });
// The image the tests build from this checkout (its sandboxd is the one measured), unless named.
const IMAGE = process.env.SANDPIT_BENCH_IMAGE ?? (await ensureTestImage({ log })).tag;
const dockerNames = async (filter: string) =>
  (await run("docker", ["ps", "--filter", filter, "--format", "{{.Names}}"])).stdout
    .split("\n")
    .filter(Boolean);
const warmBefore = await dockerNames(SERVE_WARM);
const stateDir = await mkdtemp(join(tmpdir(), "sandpit-bench-serve-"));
const serveEnv = {
  SANDPIT_API_KEYS: JSON.stringify(KEY_LIST),
  DOCKER_HOST: `unix://${engine.socketPath}`,
};
const serve = await startServe(
  ["--backend", "docker", "--image", IMAGE, "--warm", "1", "--state-dir", stateDir],
  // Debug: the Docker provider's "warm container ready" lines tell when serve's pool is refilled.
  { ...serveEnv, SANDPIT_LOG_LEVEL: "debug" },
);
// Counted from what serve wrote so far, then line by line: nothing written in between is lost
// (this runs in one tick).
const READY_LINE = '"warm container ready"';
let warmedUp = serve.stderr().split(READY_LINE).length - 1;
createInterface({ input: serve.child.stderr! }).on("line", (line) => {
  if (line.includes(READY_LINE)) warmedUp++;
});
const coldDir = await mkdtemp(join(tmpdir(), "sandpit-bench-serve-cold-"));
const serveCold = await startServe(
  ["--backend", "docker", "--image", IMAGE, "--warm", "0", "--state-dir", coldDir],
  serveEnv,
);
const direct = new DockerProvider({ image: IMAGE, containerPrefix: PREFIX, idleTimeoutMs: 0 });
const warm = new DockerProvider({
  image: IMAGE,
  containerPrefix: `${PREFIX}-w`,
  idleTimeoutMs: 0,
  warm: 1,
  basePort: 30080,
});
const api = (method: string, path: string, body?: unknown) =>
  call(serve.url, method, path, { bearer: KEYS.a }, body);
// What serve puts on each sandbox: three plain labels and its record in a few chunks.
const servelike = () => ({
  "serve.sandpit.dev/state": "sbench",
  "serve.sandpit.dev/name": fresh(),
  "serve.sandpit.dev/tenant": "a",
  "serve.sandpit.dev/r0": randomBytes(31).toString("hex"),
  "serve.sandpit.dev/r1": randomBytes(31).toString("hex"),
  "serve.sandpit.dev/r2": randomBytes(31).toString("hex"),
  "serve.sandpit.dev/r3": randomBytes(31).toString("hex"),
});

/**
 * Until serve's pool holds a warmed-up blank container again (answering, its warm-up commands
 * run): the Docker provider logs each at debug level, as `fillWarmPool()` resolves on the
 * direct side. Then the same settle as the direct side's.
 */
async function serveRefilled(): Promise<void> {
  for (let i = 0; i < 1200 && warmedUp <= claims; i++) await new Promise((r) => setTimeout(r, 100));
  if (warmedUp <= claims) throw new Error("serve's warm pool was not refilled within 120 s");
  claims++;
  await new Promise((r) => setTimeout(r, SETTLE_MS));
}
/** serve's warm creates so far (each took one warmed-up container), and its warmed-up ones. */
let claims = 0;

async function viaServe(base = serve.url): Promise<number> {
  const t0 = now();
  const made = await call(base, "POST", "/v1/sandboxes", { bearer: KEYS.a }, { threadId: fresh() });
  if (made.status !== 201) throw new Error(`serve create: ${JSON.stringify(made.json)}`);
  const out = await call(
    base,
    "POST",
    `/v1/sandboxes/${made.json.id}/proxy/v1/commands/run`,
    { bearer: KEYS.a },
    { command: "true" },
  );
  const t = now() - t0;
  if (out.json.exitCode !== 0) throw new Error(`serve run: ${JSON.stringify(out.json)}`);
  await call(base, "DELETE", `/v1/sandboxes/${made.json.id}`, { bearer: KEYS.a });
  return t;
}

async function viaProvider(p: DockerProvider, labels?: Record<string, string>): Promise<number> {
  const t0 = now();
  const sbx = await p.create({
    language: "python",
    threadId: fresh(),
    ...(labels ? { labels } : {}),
  });
  await sbx.commands.run("true");
  const t = now() - t0;
  await sbx.kill();
  return t;
}

try {
  log("1. warm create -> first command (warm-up: one of each)");
  const serveWarm = async () => {
    await serveRefilled();
    return viaServe();
  };
  const directWarm = async () => {
    await warm.fillWarmPool();
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    return viaProvider(warm, servelike());
  };
  await serveWarm();
  await directWarm();
  const served: number[] = [];
  const warmDirect: number[] = [];
  for (let i = 0; i < CREATE_RUNS; i++) {
    if (i % 2) {
      served.push(await serveWarm());
      warmDirect.push(await directWarm());
    } else {
      warmDirect.push(await directWarm());
      served.push(await serveWarm());
    }
  }
  log("   cold creates, for reference");
  const servedCold: number[] = [];
  const directCold: number[] = [];
  for (let i = 0; i < COLD_RUNS; i++) {
    servedCold.push(await viaServe(serveCold.url));
    directCold.push(await viaProvider(direct, servelike()));
  }

  log("2. command round trip on one sandbox");
  const id = (await api("POST", "/v1/sandboxes", { threadId: fresh() })).json.id as string;
  const own = await direct.create({ language: "python", threadId: fresh() });
  const serveRtt: number[] = [];
  const directRtt: number[] = [];
  const oneServe = async () => {
    const t0 = now();
    await api("POST", `/v1/sandboxes/${id}/proxy/v1/commands/run`, { command: "true" });
    return now() - t0;
  };
  const oneDirect = async () => {
    const t0 = now();
    await own.commands.run("true");
    return now() - t0;
  };
  for (let i = 0; i < RTT_WARMUP; i++) await Promise.all([oneServe(), oneDirect()]);
  for (let i = 0; i < RTT_RUNS; i++) {
    if (i % 2) {
      serveRtt.push(await oneServe());
      directRtt.push(await oneDirect());
    } else {
      directRtt.push(await oneDirect());
      serveRtt.push(await oneServe());
    }
  }
  await api("DELETE", `/v1/sandboxes/${id}`);
  await own.kill();

  const s = {
    served: summarize(served),
    warm: summarize(warmDirect),
    servedCold: summarize(servedCold),
    cold: summarize(directCold),
  };
  const r = { serve: summarize(serveRtt), direct: summarize(directRtt) };
  const verdict = (a: Summary, b: Summary) => (a.p50 <= 1.2 * b.p50 + 2 ? "met" : "missed");
  const host = hostInfo();
  const section = `## sandpit serve on Docker: claims of warmed-up containers

Command: \`node_modules/.bin/node bench/src/serve.ts\`, run ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC, commit
\`${commitMeasured() ?? "?"}\`, ${host.cpus} CPUs, load average ${loadavg()[0]!.toFixed(2)} at the end. \`sandpit serve
--backend docker\` as a child process; the Docker provider used directly in the same process as
the bench, on the same engine and image, interleaved with it. Through serve: \`POST /v1/sandboxes\`
(answers once Ready) then \`POST …/proxy/v1/commands/run {"command":"true"}\`; directly:
\`create({language, threadId, labels})\` with labels shaped like serve's, then
\`commands.run("true")\`. Warm: serve with \`--warm 1\` and a provider with \`warm: 1\`, each
pool refilled before each sample (serve's: until its Docker provider logs a warmed-up
container; the direct one's: \`fillWarmPool()\`), then ${SETTLE_MS / 1000} s for the engine to settle,
so every create claims a warmed-up container. Goal: through serve ≤ 1.2x the direct p50 + 2 ms.

| Metric (ms: p50 / p99 / max)                                                   | through serve | Docker provider directly | ratio p50 | goal |
| ------------------------------------------------------------------------------ | ------------: | -----------------------: | --------: | ---- |
| warm create → first command, labelled create (N=${CREATE_RUNS} each)                         | ${ms(s.served)} | ${ms(s.warm)} | ${(s.served.p50 / s.warm.p50).toFixed(2)}x | ${verdict(s.served, s.warm)} |
| command round trip on one sandbox (N=${RTT_RUNS} each)                                  | ${ms(r.serve)} | ${ms(r.direct)} | ${(r.serve.p50 / r.direct.p50).toFixed(2)}x | ${verdict(r.serve, r.direct)} |
| for reference: cold create → first command, no warm pool (N=${COLD_RUNS} each)              | ${ms(s.servedCold)} | ${ms(s.cold)} | ${(s.servedCold.p50 / s.cold.p50).toFixed(2)}x | |

Serve's creates carry the sandbox's record as labels (so a restart finds it); a running
container's labels cannot change, so the Docker provider keeps a claimed warm container's labels
in a file of its state directory and reads them over the container's own (list, get, the
reaper): serve's creates claim warm containers like any other.
`;
  process.stdout.write(`${section}\n`);
  const row = (metric: string, a: Summary, b: Summary) => ({
    metric,
    value: `${a.p50.toFixed(2)} ms`,
    floor: `${b.p50.toFixed(2)} ms (the Docker provider directly)`,
    ratio: Number((a.p50 / b.p50).toFixed(2)),
    goal: "≤ 1.2x + 2 ms",
    met: verdict(a, b) === "met",
  });
  await writeResults(fileURLToPath(new URL("../results/serve.json", import.meta.url)), {
    benchmark: "serve",
    ranAt: new Date().toISOString(),
    commit: commitMeasured(),
    host,
    loadAverage: { start: LOAD_START, end: loadavg()[0]! },
    results: { create: s, roundTrip: r },
    headline: [
      row("sandpit serve on Docker: warm create → first command, p50", s.served, s.warm),
      row("sandpit serve on Docker: command round trip through its proxy, p50", r.serve, r.direct),
    ],
  });
  await updateResultsMd("## sandpit serve on Docker: claims of warmed-up containers", section);
} finally {
  await serve.stop();
  await serveCold.stop();
  await direct.close();
  await warm.close();
  const { stdout } = await run("docker", ["ps", "-aq", "--filter", `name=^${PREFIX}`]);
  const ids = stdout.split("\n").filter(Boolean);
  if (ids.length) await run("docker", ["rm", "-f", "-v", ...ids]);
  // serve's blank containers (others' stay).
  const blank = (await dockerNames(SERVE_WARM)).filter((n) => !warmBefore.includes(n));
  if (blank.length) await run("docker", ["rm", "-f", "-v", ...blank]);
  await rm(stateDir, { recursive: true, force: true });
  await rm(coldDir, { recursive: true, force: true });
  await engine.stop();
}
