/** Names of the objects made for a sandbox, derived from the names they belong to. */

/** The Secret holding a sandbox's bearer token (also in its status.tokenSecretRef). */
export const tokenSecretName = (sandbox: string) => `${sandbox}-token`;

/** The PersistentVolumeClaim mounted at /mnt/user-data by a pod. */
export const dataClaimName = (pod: string) => `${pod}-data`;
