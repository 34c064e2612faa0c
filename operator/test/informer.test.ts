/**
 * The informer lists in pages (limit/continue), transforms each page as it comes, and says it is
 * synced only once the last page is in its cache, at the first page's resourceVersion.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import pino from "pino";
import { afterAll, beforeAll, expect, test } from "vitest";
import { Informer } from "../src/kube/informer.ts";
import { PODS, type Pod } from "../src/kube/resources.ts";
import { Kube } from "../src/kube/rest.ts";
import * as transforms from "../src/kube/transforms.ts";

const PODS_LISTED = 7;
let server: Server;
const lists: URLSearchParams[] = [];
const watches: URLSearchParams[] = [];

const pod = (i: number) => ({
  metadata: {
    name: `p-${i}`,
    namespace: "ns",
    uid: `u-${i}`,
    resourceVersion: String(100 + i),
    labels: { app: "x" },
    managedFields: [{ manager: "kubelet", fieldsV1: { "f:spec": {} } }],
  },
  spec: { containers: [{ name: "sandboxd", image: "i" }] },
  status: { phase: "Running", podIP: `10.0.0.${i}` },
});

beforeAll(async () => {
  server = createServer((req, res) => {
    const url = new URL(req.url!, "http://x");
    if (url.searchParams.get("watch") === "true") {
      watches.push(url.searchParams);
      res.writeHead(200, { "content-type": "application/json" });
      return; // held open
    }
    lists.push(url.searchParams);
    const limit = Number(url.searchParams.get("limit") ?? 0) || PODS_LISTED;
    const from = Number(url.searchParams.get("continue") ?? 0);
    const to = Math.min(PODS_LISTED, from + limit);
    const items = Array.from({ length: to - from }, (_, k) => pod(from + k));
    res.writeHead(200, { "content-type": "application/json" }).end(
      JSON.stringify({
        apiVersion: "v1",
        kind: "PodList",
        // A later page of the same list carries the same resourceVersion as the first.
        metadata: { resourceVersion: "42", ...(to < PODS_LISTED ? { continue: String(to) } : {}) },
        items,
      }),
    );
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
});

afterAll(() => {
  server.closeAllConnections();
  server.close();
});

test("lists page by page, caches every page transformed, then watches from the list's version", async () => {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [
      {
        name: "c",
        server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        skipTLSVerify: true,
      },
    ],
    users: [{ name: "u" }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  const informer = new Informer<Pod>(new Kube(kc, { fieldManager: "test" }), {
    resource: PODS,
    namespace: "ns",
    labelSelector: "app=x",
    logger: pino({ level: "silent" }),
    transform: transforms.pod,
    listPageSize: 3,
  });
  informer.start();
  try {
    await informer.synced;
    expect(lists.map((q) => [q.get("limit"), q.get("continue"), q.get("labelSelector")])).toEqual([
      ["3", null, "app=x"],
      ["3", "3", "app=x"],
      ["3", "6", "app=x"],
    ]);
    const cached = informer
      .list("ns")
      .map((p) => p.metadata.name)
      .sort();
    expect(cached).toEqual(Array.from({ length: PODS_LISTED }, (_, i) => `p-${i}`));
    const p = informer.get("p-6", "ns")!;
    expect(p.kind).toBe("Pod"); // filled in from the list's kind
    expect(p.apiVersion).toBe("v1");
    expect(p.status?.podIP).toBe("10.0.0.6");
    expect("spec" in p).toBe(false); // transformed
    expect("managedFields" in p.metadata).toBe(false);
    for (const until = Date.now() + 5_000; watches.length === 0 && Date.now() < until;)
      await new Promise((r) => setTimeout(r, 20));
    expect(watches[0]?.get("resourceVersion")).toBe("42");
  } finally {
    informer.stop();
  }
});
