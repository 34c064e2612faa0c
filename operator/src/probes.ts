/**
 * The probe server of the operator and the egress proxy: /healthz (liveness), /readyz (503
 * while any informer has not filled its cache) and /metrics (Prometheus text), on an address of
 * their own, never on a port sandboxes or users are meant to reach.
 */
import { type Server, createServer } from "node:http";
import type { Registry } from "prom-client";
import type { Informer } from "./kube/informer.ts";
import type { KObject } from "./kube/rest.ts";

export interface ProbeOptions {
  /** Why the process is not healthy, or undefined when it is. */
  unhealthy?: () => string | undefined;
  informers: readonly Informer<KObject>[];
  registry: Registry;
}

export function probeServer(o: ProbeOptions): Server {
  return createServer((req, res) => {
    const reply = (code: number, body: string, type = "text/plain") => {
      res.writeHead(code, { "content-type": type }).end(body);
    };
    if (req.url === "/healthz") {
      const why = o.unhealthy?.();
      return why ? reply(500, `${why}\n`) : reply(200, "ok\n");
    }
    if (req.url === "/readyz") {
      const waiting = o.informers.filter((i) => !i.isSynced).map((i) => i.resource.plural);
      return waiting.length
        ? reply(503, `caches not synced: ${waiting.join(", ")}\n`)
        : reply(200, "ok\n");
    }
    if (req.url === "/metrics") {
      o.registry.metrics().then(
        (text) => reply(200, text, o.registry.contentType),
        (err: unknown) => reply(500, String(err)),
      );
      return;
    }
    reply(404, "not found\n");
  });
}

/** Listens on host:port (an IPv6 host in brackets); resolves once listening. */
export function listen(server: Server, address: string): Promise<Server> {
  const i = address.lastIndexOf(":");
  const host = address.slice(0, i).replace(/^\[|\]$/g, "") || "0.0.0.0";
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(Number(address.slice(i + 1)), host, () => resolve(server));
  });
}
