/**
 * `sandpit serve` on Docker against the Docker provider used directly, in one run:
 *  1. create -> first command done. Through serve: `POST /v1/sandboxes` (waits for Ready) then
 *     `POST /v1/sandboxes/:id/proxy/v1/commands/run {command: "true"}`. Directly: the same
 *     provider's `create()` with the labels serve puts on a sandbox (its record), then
 *     `commands.run("true")`. Interleaved (which goes first alternates); deletes untimed.
 *     Serve's creates carry labels, and the Docker provider claims warm containers only for
 *     creates without any (a claimed container cannot take labels), so both sides are cold
 *     creates; the direct warm claim is measured too, for reference.
 *  2. a command's round trip on one running sandbox: through serve's proxy, against the SDK's
 *     own client straight to sandboxd, interleaved.
 * Goal (issue 16): through serve ≤ 1.2x the direct p50 + 2 ms.
 *
 *   node bench/src/serve.ts        (from the repository root; the sandbox image must exist)
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { DockerProvider } from "@sandpit/sdk/docker";
import { ensureDocker } from "../../test/docker/dockerd.ts";
import { call, KEYS, KEY_LIST, startServe } from "../../test/serve/harness.ts";
import { updateResultsMd } from "./kube.ts";
import { commitMeasured, hostInfo } from "./report.ts";
import { summarize, type Summary } from "./stats.ts";

const IMAGE = process.env.SANDPIT_BENCH_IMAGE ?? "sandpit-sandbox:latest";
const PREFIX = "sandpit-bench-serve";
const CREATE_RUNS = 15;
const WARM_RUNS = 10;
const RTT_WARMUP = 30;
const RTT_RUNS = 300;
const run = promisify(execFile);
const now = () => performance.now();
const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);
const fresh = () => `bench-${randomBytes(6).toString("hex")}`;
const ms = (s: Summary) => `${s.p50.toFixed(2)} / ${s.p99.toFixed(2)} / ${s.max.toFixed(2)}`;

const engine = await ensureDocker({ log });
const stateDir = await mkdtemp(join(tmpdir(), "sandpit-bench-serve-"));
const serve = await startServe(
  ["--backend", "docker", "--image", IMAGE, "--warm", "0", "--state-dir", stateDir],
  { SANDPIT_API_KEYS: JSON.stringify(KEY_LIST), DOCKER_HOST: `unix://${engine.socketPath}` },
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

async function viaServe(): Promise<number> {
  const t0 = now();
  const made = await api("POST", "/v1/sandboxes", { threadId: fresh() });
  if (made.status !== 201) throw new Error(`serve create: ${JSON.stringify(made.json)}`);
  const out = await api("POST", `/v1/sandboxes/${made.json.id}/proxy/v1/commands/run`, {
    command: "true",
  });
  const t = now() - t0;
  if (out.json.exitCode !== 0) throw new Error(`serve run: ${JSON.stringify(out.json)}`);
  await api("DELETE", `/v1/sandboxes/${made.json.id}`);
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
  log("1. create -> first command (warm-up: one of each)");
  await viaServe();
  await viaProvider(direct, servelike());
  const served: number[] = [];
  const directCold: number[] = [];
  for (let i = 0; i < CREATE_RUNS; i++) {
    const order =
      i % 2
        ? [viaServe, () => viaProvider(direct, servelike())]
        : [() => viaProvider(direct, servelike()), viaServe];
    for (const [j, f] of order.entries()) {
      const t = await f();
      ((i % 2 ? j === 0 : j === 1) ? served : directCold).push(t);
    }
  }
  log("   warm claims (direct, no labels)");
  const warmDirect: number[] = [];
  for (let i = 0; i < WARM_RUNS; i++) {
    await warm.fillWarmPool();
    warmDirect.push(await viaProvider(warm));
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

  const s = { served: summarize(served), cold: summarize(directCold), warm: summarize(warmDirect) };
  const r = { serve: summarize(serveRtt), direct: summarize(directRtt) };
  const verdict = (a: Summary, b: Summary) => (a.p50 <= 1.2 * b.p50 + 2 ? "met" : "missed");
  const host = hostInfo();
  const section = `## sandpit serve on Docker

Command: \`node_modules/.bin/node bench/src/serve.ts\`, run ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC, commit
\`${commitMeasured() ?? "?"}\`, ${host.cpus} CPUs, load average ${loadavg()[0]!.toFixed(2)} at the end. \`sandpit serve
--backend docker\` as a child process; the Docker provider used directly in the same process as
the bench, on the same engine and image, interleaved with it. Through serve: \`POST /v1/sandboxes\`
(answers once Ready) then \`POST …/proxy/v1/commands/run {"command":"true"}\`; directly:
\`create({language, threadId, labels})\` with labels shaped like serve's, then
\`commands.run("true")\`. Goal: through serve ≤ 1.2x the direct p50 + 2 ms.

| Metric (ms: p50 / p99 / max)                                                   | through serve | Docker provider directly | ratio p50 | goal |
| ------------------------------------------------------------------------------ | ------------: | -----------------------: | --------: | ---- |
| create → first command, labelled create (N=${CREATE_RUNS} each)                              | ${ms(s.served)} | ${ms(s.cold)} | ${(s.served.p50 / s.cold.p50).toFixed(2)}x | ${verdict(s.served, s.cold)} |
| command round trip on one sandbox (N=${RTT_RUNS} each)                                  | ${ms(r.serve)} | ${ms(r.direct)} | ${(r.serve.p50 / r.direct.p50).toFixed(2)}x | ${verdict(r.serve, r.direct)} |
| for reference: warm-pool claim → first command, directly, no labels (N=${WARM_RUNS}) | | ${ms(s.warm)} | | |

Serve's creates are not warm: they carry the sandbox's record as labels (so a restart finds it),
and the Docker provider claims a warm container only for a create without labels, as a running
container's labels cannot change. Until the provider keeps a claimed container's labels beside
it (as it keeps lifetimes), serve's creates cost a cold start; the ratio above compares like with
like.
`;
  process.stdout.write(`${section}\n`);
  await updateResultsMd("## sandpit serve on Docker", section);
} finally {
  await serve.stop();
  await direct.close();
  await warm.close();
  const { stdout } = await run("docker", ["ps", "-aq", "--filter", `name=^${PREFIX}`]);
  const ids = stdout.split("\n").filter(Boolean);
  if (ids.length) await run("docker", ["rm", "-f", "-v", ...ids]);
  await rm(stateDir, { recursive: true, force: true });
  await engine.stop();
}
