/**
 * The local cluster's node is this machine, and its Node object lists only the pod bridge's
 * address (10.244.0.1, private). The machine's other addresses are the node's too, and one
 * outside the private ranges (192.0.2.2 on eth0 here) reaches everything listening on every
 * address, the API server included: the operator is told them (SANDPIT_EGRESS_EXCLUDE_CIDRS,
 * the chart's sandboxes.egressExcludeCidrs), since the cluster does not report them.
 */
import { networkInterfaces } from "node:os";
import { BLOCKED_CIDRS, inCidr, ipv4 } from "../../operator/src/workload/egress.ts";

/** This machine's IPv4 addresses outside the ranges sandboxes are kept from anyway, as /32s. */
export function machineAddressCidrs(): string[] {
  return [
    ...new Set(
      Object.values(networkInterfaces())
        .flat()
        .filter((a) => a && a.family === "IPv4" && !a.internal)
        .map((a) => a!.address)
        .filter((a) => !BLOCKED_CIDRS.some((cidr) => inCidr(ipv4(a)!, cidr))),
    ),
  ].map((a) => `${a}/32`);
}
