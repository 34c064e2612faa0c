/**
 * A gate in front of the API server for one client: plain HTTP on 127.0.0.1, forwarded over TLS
 * with the kubeconfig's own credentials. Every request passes at once, but while the gate is
 * held, the events of watch responses are kept back (and delivered, in order, on release). A
 * process given `kubeconfig` then sees the cluster as a replica whose informer lags does, for as
 * long as a test wants: a race that on one quiet host lasts a millisecond, made to last.
 *
 * The other way round, `holdAnswers` keeps back the answers of the requests it matches (the
 * requests themselves reach the API server at once): the client's watch shows a write whose
 * answer it is still waiting for, as it may on a busy host.
 */
import { readFileSync } from "node:fs";
import { rm, writeFile } from "node:fs/promises";
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";

export interface WatchGate {
  /** A kubeconfig (file path) that reaches the cluster through the gate. */
  kubeconfig: string;
  /** From now on, watch events wait. */
  hold(): void;
  /** Delivers what waited, and lets events through again. */
  release(): void;
  /** From now on, answers to requests `match` accepts wait (the requests are sent at once). */
  holdAnswers(match: (method: string, path: string) => boolean): void;
  /** Delivers the answers that waited, and lets answers through again. */
  releaseAnswers(): void;
  close(): Promise<void>;
}

export async function startWatchGate(kubeconfigPath: string): Promise<WatchGate> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const cluster = kc.getCurrentCluster()!;
  const user = kc.getCurrentUser()!;
  const upstream = new URL(cluster.server);
  const tls = {
    ca: cluster.caFile ? readFileSync(cluster.caFile) : undefined,
    cert: user.certFile ? readFileSync(user.certFile) : undefined,
    key: user.keyFile ? readFileSync(user.keyFile) : undefined,
  };
  let held = false;
  const waiting = new Set<() => void>();
  let holdAnswer: ((method: string, path: string) => boolean) | undefined;
  const answersWaiting = new Set<() => void>();

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const isWatch = /[?&]watch=(true|1)\b/.test(req.url ?? "");
    const out = request(
      {
        host: upstream.hostname,
        port: upstream.port || 443,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: upstream.host },
        ...tls,
      },
      (up) => {
        if (!isWatch && holdAnswer?.(req.method ?? "GET", (req.url ?? "/").split("?")[0]!)) {
          up.pause();
          answersWaiting.add(() => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            up.pipe(res);
            up.resume();
          });
          return;
        }
        res.writeHead(up.statusCode ?? 502, up.headers);
        if (!isWatch) return void up.pipe(res);
        up.on("data", (chunk: Buffer) => {
          if (!held) return void res.write(chunk);
          up.pause();
          const resume = () => {
            res.write(chunk);
            up.resume();
          };
          waiting.add(resume);
        });
        up.on("end", () => res.end());
      },
    );
    out.on("error", () => res.destroy());
    res.on("close", () => out.destroy());
    req.pipe(out);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;

  const gated = new KubeConfig();
  gated.loadFromOptions({
    // Plain HTTP on loopback: client-node wants skipTLSVerify said for it (no TLS to verify).
    clusters: [{ name: "gated", server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: "gated" }],
    contexts: [{ name: "gated", cluster: "gated", user: "gated" }],
    currentContext: "gated",
  });
  const path = join(tmpdir(), `sandpit-watch-gate-${port}.kubeconfig`);
  await writeFile(path, gated.exportConfig());

  return {
    kubeconfig: path,
    hold: () => {
      held = true;
    },
    release: () => {
      held = false;
      for (const resume of waiting) resume();
      waiting.clear();
    },
    holdAnswers: (match) => {
      holdAnswer = match;
    },
    releaseAnswers: () => {
      holdAnswer = undefined;
      for (const deliver of answersWaiting) deliver();
      answersWaiting.clear();
    },
    close: async () => {
      await new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      });
      await rm(path, { force: true });
    },
  };
}
