/**
 * The value rules of the Sandbox API, written once for the CRD schemas and for every component
 * that checks the same values before they reach it (the provisioner's request bodies, the
 * operator's settings). Each rule is a pattern plus the words a rejected value is told.
 */
/** A Kubernetes quantity, in the subset Sandpit accepts (no exponents, no signs). */
export const QUANTITY_PATTERN = /^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$/;
export const QUANTITY_RULE = "a Kubernetes quantity such as 500m, 1, 512Mi or 2Gi";

const SUFFIX: Record<string, number> = {
  m: 1e-3,
  "": 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
};

/** The value of a quantity QUANTITY_PATTERN accepts (CPUs, bytes). */
export function quantityValue(q: string): number {
  const m = QUANTITY_PATTERN.exec(q);
  if (!m) throw new Error(`not a quantity: ${q}`);
  const suffix = m[2] ?? "";
  return Number(q.slice(0, q.length - suffix.length)) * SUFFIX[suffix]!;
}

/** A TCP port: sandboxd's rule, which the SDK and the provisioner use too. */
export { Port } from "@sandpit/sandboxd/protocol";

/** A listen address: host:port, an empty host meaning every interface. */
export const HOST_PORT_PATTERN = /^[^:]*:\d+$/;
export const HOST_PORT_RULE = "expected host:port";
