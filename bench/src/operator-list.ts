/**
 * The operator's memory while its pod informer lists N pods at start (or relists after a 410):
 * the real Informer, Kube client and pod transform against a local HTTP server that answers the
 * list (honouring limit/continue) with N copies of one real sandbox pod, and holds the watch
 * open. Each mode runs in a child process of its own, so its peak RSS (VmHWM) is its own.
 *
 *   node_modules/.bin/node bench/src/operator-list.ts [--pods N] [--pod bench/fixtures/pod.json]
 *
 * Prints, for one request holding all N pods and for pages of 500, the RSS before the list, the
 * peak RSS, and the RSS and heap used once the cache is synced.
 */
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { join } from "node:path";
import { promisify } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { Informer, LIST_PAGE_SIZE } from "../../operator/src/kube/informer.ts";
import { PODS, type Pod } from "@sandpit/operator/kube/client";
import { Kube } from "../../operator/src/kube/rest.ts";
import * as transforms from "../../operator/src/kube/transforms.ts";
import pino from "pino";
import { ROOT } from "./kube.ts";

const run = promisify(execFile);
const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
};

/** The fake API server, in the parent: its own copies of the answers are not measured. */
async function serve(pods: number, podFile: string): Promise<{ port: number; close: () => void }> {
  const template = JSON.parse(await readFile(podFile, "utf8")) as Pod;
  const item = (i: number) => {
    const name = `s-${String(i).padStart(5, "0")}`;
    return JSON.stringify({
      ...template,
      metadata: { ...template.metadata, name, uid: `uid-${i}`, resourceVersion: String(1000 + i) },
    });
  };
  const server = createServer((req, res) => {
    const url = new URL(req.url!, "http://x");
    if (url.searchParams.get("watch") === "true") {
      res.writeHead(200, { "content-type": "application/json" });
      return; // held open, silent
    }
    const limit = Number(url.searchParams.get("limit") ?? 0) || pods;
    const from = Number(url.searchParams.get("continue") ?? 0);
    const to = Math.min(pods, from + limit);
    const parts: string[] = [];
    for (let i = from; i < to; i++) parts.push(item(i));
    const body = `{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"999"${
      to < pods ? `,"continue":"${to}"` : ""
    }},"items":[${parts.join(",")}]}`;
    res.writeHead(200, { "content-type": "application/json" }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    port: (server.address() as { port: number }).port,
    close: () => server.closeAllConnections() ?? server.close(),
  };
}

async function child(port: number, pageSize: number): Promise<void> {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "c", server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: "u" }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  const kube = new Kube(kc, { fieldManager: "bench" });
  global.gc?.();
  const status = async () => {
    const s = await readFile("/proc/self/status", "utf8");
    const kib = (f: string) => Number(new RegExp(`${f}:\\s+(\\d+)`).exec(s)?.[1]);
    return { rss: kib("VmRSS") / 1024, hwm: kib("VmHWM") / 1024 };
  };
  const before = await status();
  const informer = new Informer<Pod>(kube, {
    resource: PODS,
    namespace: "ns",
    logger: pino({ level: "silent" }),
    transform: transforms.pod,
    listPageSize: pageSize,
  });
  const t0 = performance.now();
  informer.start();
  await informer.synced;
  const ms = performance.now() - t0;
  const cached = informer.list().length;
  const after = await status();
  global.gc?.();
  const settled = await status();
  process.stdout.write(
    JSON.stringify({
      pageSize,
      cached,
      ms: Math.round(ms),
      rssBeforeMiB: Math.round(before.rss),
      peakRssMiB: Math.round(after.hwm),
      rssSyncedMiB: Math.round(after.rss),
      rssAfterGcMiB: Math.round(settled.rss),
      heapUsedAfterGcMiB: Math.round(process.memoryUsage().heapUsed / 2 ** 20),
    }),
  );
  informer.stop();
  process.exit(0);
}

const pods = Number(arg("--pods") ?? 10_000);
const podFile = arg("--pod") ?? join(ROOT, "bench/fixtures/pod.json");
if (arg("--child-port") !== undefined) {
  await child(Number(arg("--child-port")), Number(arg("--child-page")));
} else {
  for (const pageSize of [0, LIST_PAGE_SIZE]) {
    const server = await serve(pods, podFile);
    try {
      const { stdout } = await run(
        process.execPath,
        [
          "--expose-gc",
          process.argv[1]!,
          "--child-port",
          String(server.port),
          "--child-page",
          String(pageSize),
        ],
        { maxBuffer: 1 << 20, timeout: 300_000 },
      );
      const r = JSON.parse(stdout) as Record<string, number>;
      const mode = pageSize ? `pages of ${pageSize}` : "one request";
      process.stdout.write(
        `${pods} pods, ${mode}: ${r.cached} cached in ${r.ms} ms; RSS before ${r.rssBeforeMiB} MiB, peak ${r.peakRssMiB}, synced ${r.rssSyncedMiB}, after a GC ${r.rssAfterGcMiB} (heap used ${r.heapUsedAfterGcMiB})\n`,
      );
    } finally {
      server.close();
    }
  }
}
