/**
 * The labels and annotations Sandpit puts on Sandboxes and on the objects made for them: the
 * one vocabulary the operator, the provisioner and anyone selecting their objects share.
 */

export const LABEL = {
  managedBy: "app.kubernetes.io/managed-by",
  name: "app.kubernetes.io/name",
  /** On a sandbox's children: the Sandbox they belong to. */
  sandbox: "sandpit.dev/sandbox",
  /** On a pool's warm pods and on its members' children: the SandboxPool. */
  pool: "sandpit.dev/pool",
  /** On a warm pod not yet claimed: "true". */
  warm: "sandpit.dev/warm",
  /**
   * On every sandbox pod and warm pod from birth, and on the egress policy it names: the pod's
   * network key (workload/network.ts networkKey). The namespace's isolation policy selects every
   * pod carrying it; the egress policy of that key adds what the pod may reach.
   */
  network: "sandpit.dev/network",
  /** On a Sandbox the provisioner made: the tenant (API key) holding it. */
  tenant: "sandpit.dev/tenant",
  /**
   * On a Sandbox the provisioner made: the user and thread it serves, as label values (the id
   * itself when it is a valid one, else a hash); the ids as given are in ANNOTATION.user/thread.
   */
  user: "sandpit.dev/user",
  thread: "sandpit.dev/thread",
} as const;

/**
 * LABEL.name of the egress proxy's pods in the system namespace: what a sandbox with
 * network.allowDomains may reach (its NetworkPolicy selects them by it).
 */
export const EGRESS_PROXY_NAME = "sandpit-egress";

/** Values of LABEL.managedBy: which component made an object. */
export const MANAGED_BY = {
  operator: "sandpit-operator",
  provisioner: "sandpit-provisioner",
} as const;

export const ANNOTATION = {
  /** Hash of the pod-shaping template fields a warm pod was made from. */
  templateHash: "sandpit.dev/template-hash",
  /** Hash of a warm pod's shape (image, limits, storage, runtime class). */
  shapeHash: "sandpit.dev/shape-hash",
  /** Hash of what the object was built from; a difference means "apply again". */
  specHash: "sandpit.dev/spec-hash",
  /**
   * On a warm pod: the random id its own warm token is derived with (warmPodToken in
   * reservations.ts). A warm pod without it was made before warm tokens were per pod: its
   * sandboxd verifies the pool's token, from the Secret `<pool>-warm-token`.
   */
  warmTokenId: "sandpit.dev/warm-token-id",
  /**
   * On a warm pod: the fingerprint of the token key its warm token was derived from
   * (keyFingerprint in reservations.ts). A pod made under a key since replaced cannot be opened:
   * it is never adopted, and the pool replaces it.
   */
  warmTokenKey: "sandpit.dev/warm-token-key",
  /** On a warm pod: the template packages are installed. */
  packagesReady: "sandpit.dev/packages-ready",
  /** On a Sandbox: the id a DeerFlow client gave it. */
  externalId: "sandpit.dev/external-id",
  /** On a Sandbox the provisioner made: the user and thread ids as the client gave them. */
  user: "sandpit.dev/user-id",
  thread: "sandpit.dev/thread-id",
  /**
   * On a StorageClass, set by the cluster's administrator: "true" when the class's volumes
   * hold their claim's size (a write past it fails), so the operator trusts it to bound a
   * sandbox's /mnt/user-data (the Sandbox's DiskEnforced condition).
   */
  enforcesCapacity: "sandpit.dev/enforces-capacity",
} as const;
