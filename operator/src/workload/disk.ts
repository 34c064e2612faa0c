/**
 * Whether a sandbox's /mnt/user-data is held to its size: the Sandbox's DiskEnforced condition.
 * A claim's size is a request to its StorageClass's provisioner, and many do not enforce it
 * (hostPath, local-path: a directory on the node's disk, which a sandbox can fill past its claim).
 * The operator cannot see what a provisioner does, so a class is trusted to enforce only when
 * it says so (the annotation sandpit.dev/enforces-capacity: "true", set by whoever runs the
 * cluster) or the operator's settings list it (SANDPIT_CAPACITY_ENFORCING_CLASSES).
 */
import { ANNOTATION } from "../api/labels.ts";
import type { ConditionInput } from "../kube/conditions.ts";
import type { Claim, StorageClass } from "../kube/resources.ts";

export const DISK_ENFORCED = "DiskEnforced";

const DEFAULT_CLASS_ANNOTATIONS = [
  "storageclass.kubernetes.io/is-default-class",
  "storageclass.beta.kubernetes.io/is-default-class",
];

/** Read access to the cached StorageClasses (cluster-scoped). */
export interface StorageClasses {
  get(name: string): StorageClass | undefined;
  list(): StorageClass[];
}

/**
 * The class a claim that names none gets, as the API server picks it: of the classes marked
 * default, the newest (by name when equally old).
 */
export function defaultClass(classes: readonly StorageClass[]): StorageClass | undefined {
  let best: StorageClass | undefined;
  for (const c of classes) {
    const a = c.metadata.annotations;
    if (!DEFAULT_CLASS_ANNOTATIONS.some((k) => a?.[k] === "true")) continue;
    const t = c.metadata.creationTimestamp ?? "";
    const bt = best?.metadata.creationTimestamp ?? "";
    if (!best || t > bt || (t === bt && c.metadata.name < best.metadata.name)) best = c;
  }
  return best;
}

/** Whether the class is trusted to hold a claim at its size: by its annotation or the settings. */
export function enforcesCapacity(c: StorageClass, trusted: readonly string[]): boolean {
  return (
    c.metadata.annotations?.[ANNOTATION.enforcesCapacity] === "true" ||
    trusted.includes(c.metadata.name)
  );
}

/**
 * What decides the condition for every sandbox: each class's enforcement and which is the
 * default. The manager reconciles every sandbox when it changes, and only then.
 */
export function classesSignature(
  classes: readonly StorageClass[],
  trusted: readonly string[],
): string {
  const each = classes
    .map((c) => `${c.metadata.name}=${enforcesCapacity(c, trusted) ? 1 : 0}`)
    .sort();
  return `${each.join(",")};default=${defaultClass(classes)?.metadata.name ?? ""}`;
}

export interface DiskInputs {
  /** The volume's size (storage.size, effective). */
  size: string;
  /** storage.sharedClaim, effective: the sandbox has no volume of its own. */
  sharedClaim?: { claimName: string } | undefined;
  /** The class the spec (or its pool's template) names, if any. */
  specClass?: string | undefined;
  /** The sandbox's own claim as the cache has it (its class is the truth once it exists). */
  claim?: Claim | undefined;
  classes: StorageClasses;
  /** SANDPIT_CAPACITY_ENFORCING_CLASSES. */
  trusted: readonly string[];
}

/** The DiskEnforced condition of a sandbox. */
export function diskCondition(i: DiskInputs): ConditionInput {
  if (i.sharedClaim) {
    return {
      type: DISK_ENFORCED,
      status: "Unknown",
      reason: "SharedClaim",
      message: `/mnt/user-data is a directory of the shared claim "${i.sharedClaim.claimName}": it is bounded by that claim's size, shared with whoever else mounts it, not by a size of this sandbox's`,
    };
  }
  const name = i.claim?.spec
    ? i.claim.spec.storageClassName
    : (i.specClass ?? defaultClass(i.classes.list())?.metadata.name);
  if (!name) {
    return {
      type: DISK_ENFORCED,
      status: "False",
      reason: "NoStorageClass",
      message: `the volume has no StorageClass (none named and no default class): nothing is known to hold /mnt/user-data at ${i.size}`,
    };
  }
  const cls = i.classes.get(name);
  if (!cls) {
    return {
      type: DISK_ENFORCED,
      status: "False",
      reason: "StorageClassNotFound",
      message: `StorageClass "${name}" does not exist: nothing is known to hold /mnt/user-data at ${i.size}`,
    };
  }
  if (enforcesCapacity(cls, i.trusted)) {
    return {
      type: DISK_ENFORCED,
      status: "True",
      reason: "StorageClassEnforces",
      message: `StorageClass "${name}" holds the volume at its size: writes to /mnt/user-data past ${i.size} fail`,
    };
  }
  return {
    type: DISK_ENFORCED,
    status: "False",
    reason: "StorageClassDoesNotEnforce",
    message: `StorageClass "${name}" (provisioner ${cls.provisioner ?? "unknown"}) is not known to enforce a claim's size: writes to /mnt/user-data can go past ${i.size} onto the node's disk. If its volumes do hold their size, annotate it ${ANNOTATION.enforcesCapacity}: "true" or list it in SANDPIT_CAPACITY_ENFORCING_CLASSES`,
  };
}
