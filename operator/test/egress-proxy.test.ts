/**
 * The egress proxy on loopback: a real proxy server, real upstream servers, real clients
 * (CONNECT tunnels and absolute-form requests, as pip, npm and curl send them). Only what the
 * cluster would tell it is given by hand: whose an address is, what resolves to what, which
 * addresses are refused.
 */
import { once } from "node:events";
import { type Server, createServer, request } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DOMAIN_PATTERN, domainAllowed, normalHost } from "../src/api/domains.ts";
import { allowanceOf } from "../src/egress-proxy/allowances.ts";
import { createProxyServer } from "../src/egress-proxy/server.ts";
import type { Sandbox, SandboxPool } from "../src/api/v1alpha1.ts";
import type { Pod } from "../src/kube/resources.ts";

describe("allowDomains patterns", () => {
  it("accepts domains and *. wildcards of two or more labels, lower case", () => {
    for (const ok of ["pypi.org", "*.github.com", "files.pythonhosted.org", "a-b.c0.io"])
      expect(DOMAIN_PATTERN.test(ok), ok).toBe(true);
    for (const bad of [
      "localhost",
      "kubernetes",
      "*.com.", // trailing dot
      "PyPI.org",
      "*",
      "*.*.org",
      "a.*.org",
      "-a.org",
      "10.0.0.1",
      "pypi.org:443",
      "",
    ])
      expect(DOMAIN_PATTERN.test(bad), bad).toBe(false);
  });

  it("matches exactly, or any name under a wildcard's domain but the domain itself", () => {
    const p = ["pypi.org", "*.github.com"];
    expect(domainAllowed("pypi.org", p)).toBe(true);
    expect(domainAllowed("x.pypi.org", p)).toBe(false);
    expect(domainAllowed("api.github.com", p)).toBe(true);
    expect(domainAllowed("a.b.github.com", p)).toBe(true);
    expect(domainAllowed("github.com", p)).toBe(false);
    expect(domainAllowed("evilgithub.com", p)).toBe(false);
    expect(domainAllowed("github.com.evil.org", p)).toBe(false);
  });

  it("compares hosts in lower case without a trailing dot, and refuses what is not a name", () => {
    expect(normalHost("PyPI.Org.")).toBe("pypi.org");
    expect(normalHost("a_b.org")).toBeUndefined();
    expect(normalHost("a..b")).toBeUndefined();
    expect(normalHost("x".repeat(254))).toBeUndefined();
  });
});

const owner = (uid: string) => [
  { apiVersion: "sandpit.dev/v1alpha1", kind: "Sandbox", name: "", uid },
];
const pod = (name: string, ip: string, sandbox: string | undefined, uid: string, more = {}): Pod =>
  ({
    metadata: {
      name,
      namespace: "ns",
      labels: sandbox ? { "sandpit.dev/sandbox": sandbox } : {},
      ownerReferences: owner(uid),
      ...more,
    },
    status: { phase: "Running", podIP: ip },
  }) as Pod;
const sandbox = (name: string, uid: string, spec: Partial<Sandbox["spec"]>): Sandbox =>
  ({ metadata: { name, namespace: "ns", uid }, spec }) as Sandbox;

describe("allowanceOf", () => {
  const domains = ["pypi.org"];
  const sandboxes = new Map<string, Sandbox>([
    ["a", sandbox("a", "ua", { network: { egress: "Allowlist", allowDomains: domains } })],
    ["b", sandbox("b", "ub", { poolRef: "p" })],
    ["c", sandbox("c", "uc", { network: { egress: "Internet" } })],
  ]);
  const pools = new Map<string, SandboxPool>([
    [
      "p",
      {
        metadata: { name: "p", namespace: "ns", uid: "upool" },
        spec: { template: { network: { egress: "Allowlist", allowDomains: ["*.npmjs.org"] } } },
      } as unknown as SandboxPool,
    ],
  ]);
  const src = (pods: Pod[]) => ({
    pods: { list: () => pods },
    sandboxes: { get: (n: string) => sandboxes.get(n) },
    pools: { get: (n: string) => pools.get(n) },
  });

  it("is the sandbox's own network, else its pool template's", () => {
    const s = src([pod("pa", "10.0.0.1", "a", "ua"), pod("pb", "10.0.0.2", "b", "ub")]);
    expect(allowanceOf(s, "10.0.0.1")).toEqual({ holder: "sandbox ns/a", domains });
    expect(allowanceOf(s, "10.0.0.2")).toEqual({
      holder: "sandbox ns/b",
      domains: ["*.npmjs.org"],
    });
  });

  it("is nothing for an address that is no sandbox's live pod, or a pod not owned by it", () => {
    const s = src([
      pod("pc", "10.0.0.3", "c", "uc"),
      pod("warm", "10.0.0.4", undefined, "pool"),
      pod("old", "10.0.0.5", "a", "a-deleted-namesake"),
      pod("gone", "10.0.0.6", "a", "ua", { deletionTimestamp: "2026-01-01T00:00:00Z" }),
    ]);
    expect(allowanceOf(s, "10.0.0.3")).toEqual({ holder: "sandbox ns/c", domains: [] });
    for (const ip of ["10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.9"])
      expect(allowanceOf(s, ip), ip).toBeUndefined();
  });

  it("gives a pool's warm pod its template's domains (it installs the template's packages), and only its own pool's pods", () => {
    const warm = (name: string, ip: string, poolUid: string) =>
      pod(name, ip, undefined, poolUid, {
        labels: { "sandpit.dev/pool": "p", "sandpit.dev/warm": "true" },
      });
    const s = src([warm("p-w1", "10.0.1.1", "upool"), warm("p-w2", "10.0.1.2", "another-pool")]);
    expect(allowanceOf(s, "10.0.1.1")).toEqual({
      holder: "warm pod ns/p-w1 of pool p",
      domains: ["*.npmjs.org"],
    });
    expect(allowanceOf(s, "10.0.1.2")).toBeUndefined();
  });

  it("answers nothing when two live pods claim one address (a deletion not seen yet)", () => {
    const s = src([pod("pa", "10.0.0.1", "a", "ua"), pod("pb", "10.0.0.1", "b", "ub")]);
    expect(allowanceOf(s, "10.0.0.1")).toBeUndefined();
  });
});

describe("the proxy", () => {
  let upstream: Server;
  let proxy: Server;
  let upPort = 0;
  let proxyPort = 0;
  /** Host headers and paths the upstream saw, in order. */
  const seen: string[] = [];
  const lookups: string[] = [];
  const names: Record<string, string[]> = {
    "pypi.org": ["127.0.0.1"],
    "api.github.com": ["127.0.0.1"],
    "evil.org": ["127.0.0.1"],
  };
  let sourceAllowed = true;

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      seen.push(`${req.headers.host} ${req.url}`);
      res.end(`hello from ${req.headers.host}${req.url}`);
    });
    upstream.listen(0, "127.0.0.1");
    await once(upstream, "listening");
    upPort = (upstream.address() as AddressInfo).port;
    proxy = createProxyServer({
      allowanceOf: (address) =>
        sourceAllowed && address === "127.0.0.1"
          ? { holder: "sandbox ns/a", domains: ["pypi.org", "*.github.com"] }
          : undefined,
      blocked: (a) => a === "127.0.0.2",
      ports: new Set([upPort]),
      lookup: async (host) => {
        lookups.push(host);
        const found = names[host];
        if (!found) throw new Error(`getaddrinfo ENOTFOUND ${host}`);
        return found;
      },
      log: pino({ level: "silent" }),
    });
    proxy.listen(0, "127.0.0.1");
    await once(proxy, "listening");
    proxyPort = (proxy.address() as AddressInfo).port;
  });

  afterAll(() => {
    proxy.closeAllConnections();
    proxy.close();
    upstream.close();
  });

  /** An absolute-form request through the proxy (what pip and npm send for http://). */
  const viaProxy = (url: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port: proxyPort, path: url }, (res) => {
        let body = "";
        res.on("data", (d: Buffer) => (body += d.toString()));
        res.on("end", () => resolve({ status: res.statusCode!, body }));
      });
      req.on("error", reject);
      req.end();
    });

  /** A CONNECT tunnel (https), then a plain HTTP request through it; the whole exchange. */
  const tunnel = (target: string, host = target.split(":")[0]) =>
    new Promise<string>((resolve, reject) => {
      const s = connect(proxyPort, "127.0.0.1", () => {
        s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
      });
      let text = "";
      let sent = false;
      s.on("data", (d: Buffer) => {
        text += d.toString();
        if (!sent && text.includes("\r\n\r\n") && text.startsWith("HTTP/1.1 200")) {
          sent = true;
          s.write(`GET /inside HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
        }
      });
      s.on("end", () => resolve(text));
      s.on("error", reject);
      s.setTimeout(10_000, () => s.destroy(new Error("tunnel timed out")));
    });

  it("forwards an allowed domain's plain HTTP request with its Host", async () => {
    const r = await viaProxy(`http://pypi.org:${upPort}/simple/demo/`);
    expect(r).toEqual({ status: 200, body: `hello from pypi.org:${upPort}/simple/demo/` });
  });

  it("tunnels CONNECT to an allowed domain, a wildcard's subdomain included", async () => {
    const out = await tunnel(`api.github.com:${upPort}`);
    expect(out).toMatch(/^HTTP\/1\.1 200 Connection Established\r\n/);
    expect(out).toContain("hello from api.github.com/inside");
  });

  it("tunnels CONNECT host:80 as curl sends it for http:// through a tunnel (the default port written out)", async () => {
    const s = connect(proxyPort, "127.0.0.1");
    await once(s, "connect");
    s.write("CONNECT pypi.org:80 HTTP/1.1\r\nHost: pypi.org:80\r\n\r\n");
    const [first] = (await once(s, "data")) as [Buffer];
    s.destroy();
    // Port 80 is not among this proxy's ports: refused for the port, not misread as no port.
    expect(first.toString()).toMatch(
      /^HTTP\/1\.1 403 Forbidden\r\n[^]*port 80: domains are reached/,
    );
  });

  it("resolves each name once and connects to the address it checked", async () => {
    lookups.length = 0;
    await viaProxy(`http://PyPI.org.:${upPort}/once`);
    expect(lookups).toEqual(["pypi.org"]);
  });

  it.each([
    ["a domain not allowed", "evil.org", /evil\.org is not in the allowDomains of sandbox ns\/a/],
    ["a wildcard's own domain", "github.com", /github\.com is not in the allowDomains/],
    ["an address", "127.0.0.1", /not a domain name/],
    ["another port", "pypi.org:22", /port 22: domains are reached on ports/],
  ])("refuses %s, with a 403 that says why, and never reaches it", async (_what, host, why) => {
    const target = host.includes(":") ? host : `${host}:${upPort}`;
    const before = seen.length;
    const out = await tunnel(target);
    expect(out).toMatch(/^HTTP\/1\.1 403 Forbidden\r\n/);
    expect(out).toMatch(why);
    const r = await viaProxy(`http://${target}/x`);
    expect(r.status).toBe(403);
    expect(r.body).toMatch(why);
    expect(seen.length).toBe(before);
  });

  it("refuses an allowed name that resolves to a refused address (checked after resolving)", async () => {
    names["pypi.org"] = ["127.0.0.1", "127.0.0.2"];
    try {
      const before = seen.length;
      const r = await viaProxy(`http://pypi.org:${upPort}/x`);
      expect(r.status).toBe(403);
      expect(r.body).toContain("pypi.org resolves to 127.0.0.2, an address no sandbox may reach");
      expect(seen.length).toBe(before);
    } finally {
      names["pypi.org"] = ["127.0.0.1"];
    }
  });

  it("refuses a source that is not a sandbox with domains", async () => {
    sourceAllowed = false;
    try {
      const r = await viaProxy(`http://pypi.org:${upPort}/x`);
      expect(r.status).toBe(403);
      expect(r.body).toContain("is not a sandbox whose network allows domains");
    } finally {
      sourceAllowed = true;
    }
  });

  it("says 502 for a name that does not resolve, 400 for what a forward proxy is not asked", async () => {
    delete names["api.github.com"];
    const r = await viaProxy(`http://api.github.com:${upPort}/`);
    names["api.github.com"] = ["127.0.0.1"];
    expect(r.status).toBe(502);
    expect(r.body).toContain("api.github.com does not resolve");
    expect((await viaProxy("/healthz")).status).toBe(400);
    expect(await tunnel("pypi.org")).toMatch(
      /^HTTP\/1\.1 400 Bad Request\r\n[^]*CONNECT takes host:port/,
    );
  });
});
