/** The cluster's own addresses an Internet sandbox may not reach: which, and in what form. */
import { describe, expect, it } from "vitest";
import {
  BLOCKED_CIDRS,
  clusterAddressExceptions,
  inCidr,
  ipv4,
  nodeAddresses,
  policyProbeFor,
  sliceAddresses,
  sliceEndpoint,
} from "../src/workload/egress.ts";
import { readConfig } from "../src/config.ts";

describe("clusterAddressExceptions", () => {
  it("keeps public IPv4 addresses as sorted /32s, each once", () => {
    expect(
      clusterAddressExceptions(["203.0.113.9", "192.0.2.2", "203.0.113.9", "198.51.100.10"]),
    ).toEqual(["192.0.2.2/32", "198.51.100.10/32", "203.0.113.9/32"]);
  });

  it("leaves out what a blocked range already covers, IPv6 and names", () => {
    expect(
      clusterAddressExceptions([
        "10.244.0.1",
        "172.16.3.4",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "fd00::2",
        "2001:db8::1",
        "node-1.example",
        "256.1.1.1",
      ]),
    ).toEqual([]);
  });

  it("reads a node's InternalIP and ExternalIP, not its hostname, and every endpoint of a slice", () => {
    expect(
      nodeAddresses({
        metadata: { name: "n" },
        status: {
          addresses: [
            { type: "InternalIP", address: "10.0.0.5" },
            { type: "ExternalIP", address: "203.0.113.9" },
            { type: "Hostname", address: "n" },
          ],
        },
      }),
    ).toEqual(["10.0.0.5", "203.0.113.9"]);
    expect(
      sliceAddresses({
        metadata: { name: "kubernetes" },
        endpoints: [{ addresses: ["198.51.100.4"] }, { addresses: ["198.51.100.5"] }],
      }),
    ).toEqual(["198.51.100.4", "198.51.100.5"]);
  });
});

describe("ipv4 and inCidr", () => {
  it("parse dotted quads and test ranges at every prefix length", () => {
    expect(ipv4("1.2.3.4")).toBe(0x01020304);
    expect(ipv4("255.255.255.255")).toBe(2 ** 32 - 1);
    expect(ipv4("1.2.3")).toBeUndefined();
    expect(inCidr(ipv4("10.255.0.1")!, "10.0.0.0/8")).toBe(true);
    expect(inCidr(ipv4("11.0.0.1")!, "10.0.0.0/8")).toBe(false);
    expect(inCidr(ipv4("172.31.255.255")!, "172.16.0.0/12")).toBe(true);
    expect(inCidr(ipv4("172.32.0.0")!, "172.16.0.0/12")).toBe(false);
    expect(inCidr(ipv4("203.0.113.9")!, "203.0.113.9/32")).toBe(true);
    expect(inCidr(ipv4("203.0.113.8")!, "203.0.113.9/32")).toBe(false);
    expect(inCidr(ipv4("8.8.8.8")!, "0.0.0.0/0")).toBe(true);
    for (const c of BLOCKED_CIDRS) expect(inCidr(ipv4(c.split("/")[0]!)!, c)).toBe(true);
  });
});

describe("the policy probe (SANDPIT_POLICY_PROBE)", () => {
  it("is the API server's first IPv4 endpoint with the slice's port", () => {
    const slice = (addresses: string[], port?: number) => ({
      metadata: { name: "kubernetes" },
      endpoints: [{ addresses }],
      ports: port ? [{ port }] : [],
    });
    expect(sliceEndpoint(slice(["fd00::1", "198.51.100.4"], 6443))).toBe("198.51.100.4:6443");
    expect(sliceEndpoint(slice(["198.51.100.4"]))).toBeUndefined();
    expect(sliceEndpoint(slice(["fd00::1"], 443))).toBeUndefined();
  });

  it("is given to every pod but one whose allowlist reaches the target", () => {
    const probe = "198.51.100.4:6443";
    expect(policyProbeFor(probe, { egress: "Internet" })).toBe(probe);
    expect(policyProbeFor(probe, { egress: "Deny" })).toBe(probe);
    expect(policyProbeFor(undefined, { egress: "Deny" })).toBeUndefined();
    const allow = (cidr: string, ports?: number[]) => ({
      egress: "Allowlist",
      allow: [{ cidr: "203.0.113.0/24" }, { cidr, ...(ports ? { ports } : {}) }],
    });
    expect(policyProbeFor(probe, allow("198.51.100.0/24", [80]))).toBe(probe); // other port
    expect(policyProbeFor(probe, allow("198.51.100.8/29"))).toBe(probe); // other addresses
    expect(policyProbeFor(probe, allow("198.51.100.0/24"))).toBeUndefined();
    expect(policyProbeFor(probe, allow("198.51.100.4/32", [6443]))).toBeUndefined();
  });

  it("is on by default (the API server), and takes off or a host:port", () => {
    expect(readConfig({}).policyProbe).toBe("apiserver");
    expect(readConfig({ SANDPIT_POLICY_PROBE: "off" }).policyProbe).toBe("off");
    expect(readConfig({ SANDPIT_POLICY_PROBE: "[fd00::1]:443" }).policyProbe).toBe("[fd00::1]:443");
    for (const bad of ["10.0.0.1", "on", ":443"])
      expect(() => readConfig({ SANDPIT_POLICY_PROBE: bad }), bad).toThrow(/SANDPIT_POLICY_PROBE/);
  });
});
