/**
 * The domains a sandbox with `network.allowDomains` may reach through the egress proxy, and how
 * a host is matched against them. One definition for the CRD's validation and the proxy's check.
 *
 * A pattern is a lower-case domain of two or more labels (`pypi.org`), or `*.` and such a
 * domain (`*.github.com`: any name under it, at any depth, not the domain itself). Single-label
 * names (`kubernetes`, `localhost`) are refused: inside a cluster they resolve through search
 * domains to the cluster's own Services.
 */

const LABEL = "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?";
/** The last label starts with a letter, as every top-level domain does: 10.0.0.1 is no domain. */
const TOP = "[a-z]([a-z0-9-]{0,61}[a-z0-9])?";

/** A pattern `network.allowDomains` accepts. */
export const DOMAIN_PATTERN = new RegExp(`^(\\*\\.)?(${LABEL}\\.)+${TOP}$`);

/** `host` as the proxy compares it: lower case, no trailing dot; undefined when not a name. */
export function normalHost(host: string): string | undefined {
  const h = host.toLowerCase().replace(/\.$/, "");
  return h.length <= 253 && new RegExp(`^(${LABEL}\\.)*${LABEL}$`).test(h) ? h : undefined;
}

/** Whether `host` (normalised) is one of `patterns`. */
export function domainAllowed(host: string, patterns: readonly string[]): boolean {
  // "*.github.com" is matched by its ".github.com": "github.com" and "evilgithub.com" are not.
  return patterns.some((p) => (p.startsWith("*.") ? host.endsWith(p.slice(1)) : host === p));
}
