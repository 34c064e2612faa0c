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

/**
 * A quantity of zero ("0", "0.0", "0m", "0Gi"): Kubernetes reads a zero limit as "no limit", so
 * no limit anywhere in the API may be zero. Written for QUANTITY_PATTERN's values (no signs, no
 * exponents), so the CRD's CEL rule and every other check use the same pattern.
 */
export const ZERO_QUANTITY_PATTERN = /^[0.]+[a-zA-Z]*$/;
export const POSITIVE_QUANTITY_RULE = "above zero (a zero limit would mean no limit at all)";

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

/** A PersistentVolumeClaim's name (a DNS-1123 subdomain). */
export const CLAIM_NAME_PATTERN =
  /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
export const CLAIM_NAME_RULE =
  "a PersistentVolumeClaim name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit";

/** An absolute container path of plain segments (no '.' or '..', no trailing '/'). */
export const MOUNT_PATH_PATTERN = /^(\/[A-Za-z0-9._-]+)+$/;
export const MOUNT_PATH_RULE =
  "an absolute path of segments made of letters, digits, '.', '_' and '-', such as /mnt/skills";

/**
 * Paths a mount may not cover, lie under or contain: sandboxd's volume, its scratch space, its
 * install directory (OPT in images/build.ts) and the system directories the sandbox runs on.
 */
export const RESERVED_MOUNT_PATHS = [
  "/mnt/user-data",
  "/tmp",
  "/opt/sandpit",
  "/bin",
  "/dev",
  "/etc",
  "/lib",
  "/lib64",
  "/proc",
  "/sbin",
  "/sys",
  "/usr",
] as const;

/** Whether a mount at `path` would shadow or be shadowed by one of RESERVED_MOUNT_PATHS. */
export const reservedMountPath = (path: string) =>
  RESERVED_MOUNT_PATHS.find(
    (r) => path === r || path.startsWith(`${r}/`) || r.startsWith(`${path}/`),
  );

/**
 * A path inside a claim, relative, of plain segments; `{user}` and `{thread}` stand for the
 * sandbox's userId and threadId.
 */
export const SUB_PATH_PATTERN =
  /^([A-Za-z0-9._-]|\{user\}|\{thread\})+(\/([A-Za-z0-9._-]|\{user\}|\{thread\})+)*$/;
export const SUB_PATH_RULE =
  "a relative path of segments made of letters, digits, '.', '_', '-', {user} and {thread}, such as users/{user}/threads/{thread}/user-data";

/** Whether a path has a '.' or '..' segment (a subPath must stay inside its claim). */
export const hasDotSegment = (path: string) => path.split("/").some((s) => s === "." || s === "..");
