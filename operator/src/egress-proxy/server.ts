/**
 * The egress proxy: an HTTP forward proxy (CONNECT for HTTPS, absolute-form requests for plain
 * HTTP) through which a sandbox with `network.allowDomains` reaches those domains and nothing
 * else. The sandbox's NetworkPolicy lets it reach this proxy and no other address, so this is
 * the only way out, and every connection is decided here:
 * 1. the source address must be a live sandbox pod (allowances.ts), and its domains are its own;
 * 2. the target is a name (never an address literal: ranges are `network.allow`'s business), on
 *    port 80 or 443, matching one of the domains (api/domains.ts);
 * 3. the proxy resolves the name itself (IPv4), refuses it when any address it gets is private,
 *    special or one of the cluster's own (the Internet policy's exclusions), and connects to the
 *    address it checked, so a second resolution (DNS rebinding) cannot move the connection.
 * A refusal is an HTTP 403 whose body says which rule refused, so `pip` and `curl` print why.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import { type IncomingMessage, type ServerResponse, createServer, request } from "node:http";
import { type Socket, connect, isIP } from "node:net";
import type { Logger } from "pino";
import { domainAllowed, normalHost } from "../api/domains.ts";
import type { Allowance } from "./allowances.ts";

/** Ports a domain is reached on: HTTP and HTTPS, what package managers and APIs use. */
export const PROXIED_PORTS: ReadonlySet<number> = new Set([80, 443]);
/** A tunnel or request with no traffic for this long is closed. */
const IDLE_MS = 5 * 60_000;
const CONNECT_TIMEOUT_MS = 10_000;

export type Decision = "allowed" | "refused" | "failed";

export interface ProxyOptions {
  /** The allowance of a source address (allowances.ts), undefined when it is not a sandbox's. */
  allowanceOf(address: string): Allowance | undefined;
  /** Whether an IPv4 address is one no sandbox may reach. */
  blocked(address: string): boolean;
  /** Ports a domain may be reached on; PROXIED_PORTS by default. */
  ports?: ReadonlySet<number>;
  /** Name resolution; the system resolver by default (tests give their own). */
  lookup?: (host: string) => Promise<string[]>;
  log: Logger;
  /** Each connection's outcome, for the metrics. */
  onDecision?: (decision: Decision) => void;
}

class Refusal extends Error {
  readonly status: 400 | 403 | 502;
  constructor(status: 400 | 403 | 502, message: string) {
    super(message);
    this.status = status;
  }
}

const systemLookup = async (host: string) =>
  (await dnsLookup(host, { all: true, family: 4 })).map((a) => a.address);

/** What the client asked for, checked: the address to connect to and the name it came from. */
interface Target {
  host: string;
  port: number;
  address: string;
  holder: string;
}

export function createProxyServer(o: ProxyOptions) {
  const lookup = o.lookup ?? systemLookup;
  const ports = o.ports ?? PROXIED_PORTS;

  async function decide(source: string, host: string, port: number): Promise<Target> {
    const allowance = o.allowanceOf(source);
    if (!allowance?.domains.length)
      throw new Refusal(403, `${source} is not a sandbox whose network allows domains`);
    const name = normalHost(host);
    if (!name || isIP(host))
      throw new Refusal(403, `${host} is not a domain name: the proxy reaches domains only`);
    if (!ports.has(port))
      throw new Refusal(
        403,
        `port ${port}: domains are reached on ports ${[...ports].join(" and ")} only`,
      );
    if (!domainAllowed(name, allowance.domains))
      throw new Refusal(403, `${name} is not in the allowDomains of ${allowance.holder}`);
    let addresses: string[];
    try {
      addresses = await lookup(name);
    } catch (err) {
      throw new Refusal(502, `${name} does not resolve: ${(err as Error).message}`);
    }
    const bad = addresses.find((a) => o.blocked(a));
    if (bad) throw new Refusal(403, `${name} resolves to ${bad}, an address no sandbox may reach`);
    if (!addresses[0]) throw new Refusal(502, `${name} has no IPv4 address`);
    return { host: name, port, address: addresses[0], holder: allowance.holder };
  }

  const sourceOf = (s: Socket) => (s.remoteAddress ?? "").replace(/^::ffff:/, "");

  function record(decision: Decision, fields: Record<string, unknown>, msg: string) {
    o.onDecision?.(decision);
    (decision === "allowed" ? o.log.info : o.log.warn).call(o.log, fields, msg);
  }

  /** Connects to the checked address; rejects with a 502 refusal when it cannot. */
  function open(t: Target): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const s = connect({ host: t.address, port: t.port, timeout: CONNECT_TIMEOUT_MS });
      s.once("connect", () => {
        s.setTimeout(IDLE_MS);
        resolve(s);
      });
      s.once("timeout", () => s.destroy(new Error("timed out")));
      s.once("error", (err) =>
        reject(new Refusal(502, `${t.host} (${t.address}:${t.port}): ${err.message}`)),
      );
    });
  }

  // No limit on a whole request (an upload may take long), but a connection with no traffic
  // for IDLE_MS is closed; the headers must come within Node's default minute.
  const server = createServer({ requestTimeout: 0 }, (req, res) => {
    void forward(req, res);
  });
  server.setTimeout(IDLE_MS);

  server.on("connect", (req: IncomingMessage, client: Socket, head: Buffer) => {
    void tunnel(req, client, head);
  });

  async function tunnel(req: IncomingMessage, client: Socket, head: Buffer) {
    const source = sourceOf(client);
    client.on("error", () => client.destroy());
    // host:port as it is written: a URL parser would drop a port that is its scheme's default.
    const target = /^(\[[0-9a-fA-F:.]+\]|[^:/\s[\]]+):([0-9]{1,5})$/.exec(req.url ?? "");
    try {
      if (!target) throw new Refusal(400, `CONNECT takes host:port, not ${req.url}`);
      const t = await decide(source, target[1]!.replace(/^\[|\]$/g, ""), Number(target[2]));
      const upstream = await open(t);
      record("allowed", { source, holder: t.holder, host: t.host, port: t.port }, "tunnel");
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length) upstream.write(head);
      client.setTimeout(IDLE_MS, () => client.destroy());
      upstream.on("timeout", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
      upstream.on("close", () => client.destroy());
      client.on("close", () => upstream.destroy());
      upstream.pipe(client);
      client.pipe(upstream);
    } catch (err) {
      const r = refusal(err);
      record(
        r.status === 502 ? "failed" : "refused",
        { source, target: req.url, reason: r.message },
        "tunnel refused",
      );
      client.end(
        `HTTP/1.1 ${r.status} ${r.status === 502 ? "Bad Gateway" : r.status === 400 ? "Bad Request" : "Forbidden"}\r\n` +
          `Content-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(r.message) + 1}\r\nConnection: close\r\n\r\n${r.message}\n`,
      );
    }
  }

  async function forward(req: IncomingMessage, res: ServerResponse) {
    const source = sourceOf(req.socket);
    const url = req.url?.startsWith("http://") ? URL.parse(req.url) : null;
    try {
      if (!url)
        throw new Refusal(
          400,
          `this is a forward proxy: ask for http://host/path, or CONNECT host:443 for https`,
        );
      const t = await decide(source, url.hostname, Number(url.port || 80));
      const headers = { ...req.headers };
      // Hop-by-hop headers are the proxy's, not the origin's.
      for (const h of ["proxy-connection", "proxy-authorization", "connection", "keep-alive"])
        delete headers[h];
      headers.host = url.host;
      await new Promise<void>((resolve, reject) => {
        const up = request(
          {
            host: t.address,
            port: t.port,
            method: req.method,
            path: `${url.pathname}${url.search}`,
            headers,
            setHost: false,
            timeout: CONNECT_TIMEOUT_MS,
          },
          (answer) => {
            record(
              "allowed",
              { source, holder: t.holder, host: t.host, port: t.port, status: answer.statusCode },
              "request",
            );
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(res);
            answer.on("end", resolve);
            answer.on("error", reject);
          },
        );
        up.on("timeout", () => up.destroy(new Error("timed out")));
        up.on("error", (err) =>
          reject(res.headersSent ? err : new Refusal(502, `${t.host}: ${err.message}`)),
        );
        req.pipe(up);
      });
    } catch (err) {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      const r = refusal(err);
      record(
        r.status === 502 ? "failed" : "refused",
        { source, target: req.url, reason: r.message },
        "request refused",
      );
      res.writeHead(r.status, { "content-type": "text/plain", connection: "close" });
      res.end(`${r.message}\n`);
    }
  }

  return server;
}

function refusal(err: unknown): Refusal {
  return err instanceof Refusal ? err : new Refusal(502, (err as Error).message);
}
