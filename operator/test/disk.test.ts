/**
 * The DiskEnforced condition (operator/src/workload/disk.ts): a Sandbox says whether its
 * /mnt/user-data is held to its size, from its claim's StorageClass and whether that class is
 * trusted to enforce sizes (annotated sandpit.dev/enforces-capacity: "true", or listed in
 * SANDPIT_CAPACITY_ENFORCING_CLASSES).
 */
import { describe, expect, test } from "vitest";
import type { Claim, StorageClass } from "../src/kube/resources.ts";
import * as transforms from "../src/kube/transforms.ts";
import {
  classesSignature,
  defaultClass,
  diskCondition,
  enforcesCapacity,
} from "../src/workload/disk.ts";

const DEFAULT = "storageclass.kubernetes.io/is-default-class";
const ENFORCES = "sandpit.dev/enforces-capacity";

function cls(
  name: string,
  annotations: Record<string, string> = {},
  created = "2026-01-01T00:00:00Z",
  provisioner = "example.com/csi",
): StorageClass {
  return {
    apiVersion: "storage.k8s.io/v1",
    kind: "StorageClass",
    metadata: { name, annotations, creationTimestamp: created },
    provisioner,
  };
}

function cache(...list: StorageClass[]) {
  return {
    get: (n: string) => list.find((c) => c.metadata.name === n),
    list: () => list,
  };
}

const claimOf = (storageClassName?: string): Claim => ({
  apiVersion: "v1",
  kind: "PersistentVolumeClaim",
  metadata: { name: "s-data", namespace: "t" },
  spec: storageClassName === undefined ? {} : { storageClassName },
});

const ENFORCING = cls("fast", { [DEFAULT]: "true", [ENFORCES]: "true" });
const HOSTPATH = cls("local-path", {}, "2026-01-01T00:00:00Z", "rancher.io/local-path");

describe("which classes enforce", () => {
  test("only those annotated true, or listed in the settings", () => {
    expect(enforcesCapacity(ENFORCING, [])).toBe(true);
    expect(enforcesCapacity(HOSTPATH, [])).toBe(false);
    expect(enforcesCapacity(cls("x", { [ENFORCES]: "yes" }), [])).toBe(false);
    expect(enforcesCapacity(cls("x", { [ENFORCES]: "false" }), [])).toBe(false);
    expect(enforcesCapacity(HOSTPATH, ["local-path"])).toBe(true);
  });

  test("the default class is the newest of those marked default, as the API server picks it", () => {
    const old = cls("old", { [DEFAULT]: "true" }, "2025-01-01T00:00:00Z");
    const recent = cls("new", { [DEFAULT]: "true" }, "2026-06-01T00:00:00Z");
    const beta = cls("beta", { "storageclass.beta.kubernetes.io/is-default-class": "true" });
    expect(defaultClass([old, recent, HOSTPATH])?.metadata.name).toBe("new");
    expect(defaultClass([beta])?.metadata.name).toBe("beta");
    expect(defaultClass([HOSTPATH, cls("f", { [DEFAULT]: "false" })])).toBeUndefined();
  });

  test("the signature changes with an annotation, a listed class or the default, not otherwise", () => {
    const base = classesSignature([ENFORCING, HOSTPATH], []);
    expect(classesSignature([HOSTPATH, ENFORCING], [])).toBe(base);
    expect(classesSignature([ENFORCING, HOSTPATH], ["local-path"])).not.toBe(base);
    const annotated = cls("local-path", { [ENFORCES]: "true" });
    expect(classesSignature([ENFORCING, annotated], [])).not.toBe(base);
    const notDefault = cls("fast", { [ENFORCES]: "true" });
    expect(classesSignature([notDefault, HOSTPATH], [])).not.toBe(base);
  });
});

describe("the DiskEnforced condition", () => {
  const classes = cache(ENFORCING, HOSTPATH);
  const base = { size: "1Gi", classes, trusted: [] as string[] };

  test("True on a class that enforces, from the claim, the spec or the default", () => {
    for (const inputs of [
      { ...base, claim: claimOf("fast") },
      { ...base, specClass: "fast" },
      base, // the default class
    ]) {
      expect(diskCondition(inputs)).toEqual({
        type: "DiskEnforced",
        status: "True",
        reason: "StorageClassEnforces",
        message:
          'StorageClass "fast" holds the volume at its size: writes to /mnt/user-data past 1Gi fail',
      });
    }
  });

  test("False on a class that does not say it enforces, naming it and what to do", () => {
    const c = diskCondition({ ...base, specClass: "local-path" });
    expect(c).toMatchObject({
      type: "DiskEnforced",
      status: "False",
      reason: "StorageClassDoesNotEnforce",
    });
    expect(c.message).toBe(
      'StorageClass "local-path" (provisioner rancher.io/local-path) is not known to enforce a claim\'s size: writes to /mnt/user-data can go past 1Gi onto the node\'s disk. If its volumes do hold their size, annotate it sandpit.dev/enforces-capacity: "true" or list it in SANDPIT_CAPACITY_ENFORCING_CLASSES',
    );
    // Listed in the settings, it is trusted.
    expect(
      diskCondition({ ...base, specClass: "local-path", trusted: ["local-path"] }).status,
    ).toBe("True");
  });

  test("the claim's class is the truth once it exists", () => {
    // The spec names none and the default enforces, but the claim was given local-path (the
    // default class when it was made).
    expect(diskCondition({ ...base, claim: claimOf("local-path") }).status).toBe("False");
    // A claim made when there was no default class has none.
    expect(diskCondition({ ...base, claim: claimOf(undefined) }).reason).toBe("NoStorageClass");
    expect(diskCondition({ ...base, claim: claimOf("") }).reason).toBe("NoStorageClass");
  });

  test("False when the class does not exist or there is no class at all", () => {
    expect(diskCondition({ ...base, specClass: "gone" })).toMatchObject({
      status: "False",
      reason: "StorageClassNotFound",
      message: 'StorageClass "gone" does not exist: nothing is known to hold /mnt/user-data at 1Gi',
    });
    expect(diskCondition({ ...base, classes: cache(HOSTPATH) })).toMatchObject({
      status: "False",
      reason: "NoStorageClass",
    });
  });

  test("Unknown on a shared claim: the size is the claim's, not the sandbox's", () => {
    expect(
      diskCondition({ ...base, sharedClaim: { claimName: "team" }, specClass: "fast" }),
    ).toMatchObject({ status: "Unknown", reason: "SharedClaim" });
  });
});

describe("what the caches keep", () => {
  test("of a StorageClass, its name, age, provisioner and the annotations read", () => {
    const served = {
      apiVersion: "storage.k8s.io/v1",
      kind: "StorageClass",
      metadata: {
        name: "fast",
        uid: "u",
        resourceVersion: "7",
        creationTimestamp: "2026-01-01T00:00:00Z",
        annotations: {
          [DEFAULT]: "true",
          [ENFORCES]: "true",
          "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
        managedFields: [{ manager: "kubectl" }],
      },
      provisioner: "example.com/csi",
      parameters: { type: "ssd" },
      reclaimPolicy: "Delete",
      allowVolumeExpansion: true,
    } as unknown as StorageClass;
    expect(transforms.storageClass(served)).toEqual({
      apiVersion: "storage.k8s.io/v1",
      kind: "StorageClass",
      metadata: {
        name: "fast",
        uid: "u",
        resourceVersion: "7",
        creationTimestamp: "2026-01-01T00:00:00Z",
        annotations: { [DEFAULT]: "true", [ENFORCES]: "true" },
      },
      provisioner: "example.com/csi",
    });
  });

  test("of a claim, its class", () => {
    expect(transforms.claim(claimOf("standard")).spec).toEqual({ storageClassName: "standard" });
    expect(transforms.claim(claimOf(undefined)).spec).toBeUndefined();
  });
});
