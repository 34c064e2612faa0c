/**
 * The cluster's own addresses an `Internet` sandbox must not reach although they may lie in a
 * public range: every Node's InternalIP and ExternalIP (the kubelet, node ports, whatever the
 * node serves) and the API server's endpoints (the `kubernetes` Service's EndpointSlices in
 * `default`). Read from the informer caches, so a node added or an API server moved changes
 * them; as /32s, sorted, so the policy built from them, and its hash, change only when the set
 * does.
 */
import type { EndpointSlice, Node } from "../kube/resources.ts";

/** Private and special ranges an `Internet` sandbox must never reach (metadata included). */
export const BLOCKED_CIDRS = [
  "10.0.0.0/8",
  "172.16.0.0/12",
  "192.168.0.0/16",
  "100.64.0.0/10",
  "169.254.0.0/16",
  "127.0.0.0/8",
  "0.0.0.0/8",
  "224.0.0.0/4",
  "240.0.0.0/4",
];

/** An IPv4 address as an unsigned 32-bit number; undefined for anything else (IPv6 included). */
export function ipv4(address: string): number | undefined {
  const parts = address.split(".");
  if (parts.length !== 4) return undefined;
  let n = 0;
  for (const p of parts) {
    if (!/^[0-9]{1,3}$/.test(p) || Number(p) > 255) return undefined;
    n = n * 256 + Number(p);
  }
  return n;
}

/** Whether the IPv4 address `ip` lies in the IPv4 range `cidr`. */
export function inCidr(ip: number, cidr: string): boolean {
  const [base, bits] = cidr.split("/");
  const b = ipv4(base ?? "");
  const len = Number(bits);
  if (b === undefined || !(len >= 0 && len <= 32)) return false;
  if (len === 0) return true;
  const size = 2 ** (32 - len);
  return Math.floor(ip / size) === Math.floor(b / size);
}

/** A Node's InternalIP and ExternalIP addresses. */
export function nodeAddresses(node: Node): string[] {
  return (node.status?.addresses ?? [])
    .filter((a) => a.type === "InternalIP" || a.type === "ExternalIP")
    .map((a) => a.address);
}

/** The addresses of an EndpointSlice's endpoints, ready or not. */
export function sliceAddresses(slice: EndpointSlice): string[] {
  return (slice.endpoints ?? []).flatMap((e) => e.addresses);
}

/** The API server's first IPv4 endpoint as host:port (what a policy probe connects to), if any. */
export function sliceEndpoint(slice: EndpointSlice): string | undefined {
  const port = slice.ports?.[0]?.port;
  const address = sliceAddresses(slice).find((a) => ipv4(a) !== undefined);
  return port && address ? `${address}:${port}` : undefined;
}

/**
 * What an Internet policy adds to its exceptions of `addresses`: IPv4 only (the policy allows
 * 0.0.0.0/0, so no IPv6 address is reachable under it anyway), not already inside a blocked
 * range, each once, in numeric order, as /32.
 */
export function clusterAddressExceptions(addresses: Iterable<string>): string[] {
  const seen = new Map<number, string>();
  for (const address of addresses) {
    const n = ipv4(address);
    if (n === undefined || seen.has(n) || BLOCKED_CIDRS.some((c) => inCidr(n, c))) continue;
    seen.set(n, `${address}/32`);
  }
  return [...seen].sort(([a], [b]) => a - b).map(([, cidr]) => cidr);
}

/**
 * The probe target a pod with `network` is given (SANDBOXD_ISOLATION_PROBE), or undefined: none
 * configured, or an Allowlist that lets the pod reach it (the probe would never fail there, and
 * the sandbox would never be Ready; such a sandbox is not gated, which docs/security.md says).
 */
export function policyProbeFor(
  probe: string | undefined,
  network: { egress: string; allow?: { cidr: string; ports?: number[] }[] },
): string | undefined {
  if (!probe || network.egress !== "Allowlist") return probe;
  const i = probe.lastIndexOf(":");
  const ip = ipv4(probe.slice(0, i));
  const port = Number(probe.slice(i + 1));
  const reachable = (network.allow ?? []).some(
    (r) => (ip === undefined || inCidr(ip, r.cidr)) && (!r.ports?.length || r.ports.includes(port)),
  );
  return reachable ? undefined : probe;
}
