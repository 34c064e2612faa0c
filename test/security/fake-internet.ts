/**
 * The security suites' "internet": an HTTP server in a network namespace of its own, on
 * public-range addresses (198.51.100.0/24, documentation, not a blocked range) routed from the
 * node through a veth pair. The namespace is unnamed and held by the server alone (`unshare
 * --net`: nothing under /run/netns, which containerd uses for the pods' namespaces), so the
 * namespace, the pair, its addresses and routes all end with the server.
 *
 * It answers `nonce` on `/`, and the files of `root` (a directory) on any other path (a
 * directory's index.html; HTML, package archives, else JSON: a package index and a registry);
 * on every port in `ports`.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { readlinkSync } from "node:fs";
import { waitFor } from "../cluster/harness.ts";

export interface FakeInternet {
  /** The router's address on the node's side, then the server's addresses. */
  router: string;
  addresses: string[];
  stop(): Promise<void>;
}

const ip = (...args: string[]) => execFileSync("ip", args, { stdio: "pipe", timeout: 10_000 });

const SERVER = `
const { createServer } = require("node:http");
const { readFile } = require("node:fs/promises");
const { join, normalize } = require("node:path");
const [nonce, root, ...ports] = process.argv.slice(1);
const server = async (q, r) => {
  const path = new URL(q.url, "http://x").pathname;
  if (path === "/" || !root) return r.end(nonce);
  const under = join(root, normalize(path).replace(/^(\\.\\.[/\\\\])+/, ""));
  const file = under.endsWith("/") ? join(under, "index.html") : under;
  const archive = file.endsWith(".whl") || file.endsWith(".tgz");
  const type = file.endsWith(".html") ? "text/html" : archive ? "application/octet-stream" : "application/json";
  try {
    const body = await readFile(file);
    r.writeHead(200, { "content-type": type }).end(body);
  } catch {
    r.writeHead(404).end("not found");
  }
};
for (const port of ports) createServer(server).listen(Number(port), "0.0.0.0");
`;

/**
 * Starts the server with `count` addresses of a random /29 of 198.51.100.0/24 and waits until
 * the node reaches each of them on the first port.
 */
export async function startFakeInternet(o: {
  nonce: string;
  ports: number[];
  root?: string;
  count?: number;
}): Promise<FakeInternet> {
  const rand = Math.random().toString(36).slice(2, 7);
  const vethHost = `spfi${rand}h`;
  const vethNs = `spfi${rand}n`;
  const block = 8 * (1 + Math.floor(Math.random() * 30));
  const router = `198.51.100.${block + 1}`;
  const addresses = Array.from({ length: o.count ?? 1 }, (_, i) => `198.51.100.${block + 2 + i}`);
  const server: ChildProcess = spawn(
    "unshare",
    ["--net", process.execPath, "-e", SERVER, o.nonce, o.root ?? "", ...o.ports.map(String)],
    { stdio: "ignore" },
  );
  let vethMade = false;
  const stop = async () => {
    if (server.pid && server.exitCode === null) {
      const exited = new Promise((r) => server.once("exit", r));
      server.kill("SIGTERM"); // its network namespace, and the veth pair in it, end with it
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
    }
    if (vethMade) {
      try {
        ip("link", "del", vethHost); // gone with the namespace already, unless moving it failed
      } catch {
        // already gone
      }
    }
  };
  try {
    const pid = String(server.pid);
    const hostNet = readlinkSync("/proc/self/ns/net");
    await waitFor("the server in a network namespace of its own", 10_000, async () => {
      if (server.exitCode !== null) throw new Error(`server exited ${server.exitCode}`);
      return readlinkSync(`/proc/${pid}/ns/net`) !== hostNet;
    });
    const inServer = (...args: string[]) =>
      execFileSync("nsenter", ["--target", pid, "--net", "ip", ...args], {
        stdio: "pipe",
        timeout: 10_000,
      });
    ip("link", "add", vethHost, "type", "veth", "peer", "name", vethNs);
    vethMade = true;
    ip("link", "set", vethNs, "netns", pid);
    ip("addr", "add", `${router}/29`, "dev", vethHost);
    ip("link", "set", vethHost, "up");
    for (const a of addresses) inServer("addr", "add", `${a}/29`, "dev", vethNs);
    inServer("link", "set", "lo", "up");
    inServer("link", "set", vethNs, "up");
    inServer("route", "add", "default", "via", router);
    for (const address of addresses) {
      await waitFor(`the test's internet server on ${address}`, 20_000, async () => {
        if (server.exitCode !== null) throw new Error(`server exited ${server.exitCode}`);
        const res = await fetch(`http://${address}:${o.ports[0]}/`);
        return (await res.text()) === o.nonce;
      });
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { router, addresses, stop };
}
