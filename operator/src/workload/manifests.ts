/**
 * The objects a sandbox is made of, as pure functions of its effective spec: the Pod running
 * sandboxd (with the claims it mounts), the PVC at /mnt/user-data and the Secret holding its
 * bearer token (its network policies are workload/network.ts's). Secure defaults
 * (docs/security.md) live here and there alone.
 */
import { createHash, randomBytes } from "node:crypto";
import { SANDBOXD_PORT, VIRTUAL_ROOT } from "@sandpit/sandboxd/protocol";
import { LABEL, MANAGED_BY } from "../api/labels.ts";
import { quantityValue } from "../api/rules.ts";
import type { OperatorConfig } from "../config.ts";
import type { KObject, OwnerReference } from "../kube/rest.ts";
import type { ClaimMount } from "./mounts.ts";
import type { Effective } from "./spec.ts";

export const UID = 1000;

export { BLOCKED_CIDRS } from "./egress.ts";

const smaller = (a: string, b: string) => (quantityValue(a) <= quantityValue(b) ? a : b);

const MiB = 1024 ** 2;

/**
 * The size of a sandbox's /tmp: 512Mi, or half its memory limit when that is smaller.
 *
 * /tmp is a memory-backed emptyDir (a tmpfs). A disk-backed one's sizeLimit is enforced only
 * by eviction: the kubelet measures emptyDirs on its housekeeping pass, so 700 MiB written to
 * a 512Mi /tmp all landed on the node's disk and the pod was evicted 50 to 77 s later. For a
 * memory-backed emptyDir the kubelet mounts a tmpfs of size min(sizeLimit, the pod's memory
 * limit) (SizeMemoryBackedVolumes, GA and always on since Kubernetes 1.32), so the write itself
 * fails with ENOSPC at the size. Its pages are charged to the pod's memory cgroup: the node's
 * memory is bounded by the pod's limit, as its disk was not. Half the memory limit at most,
 * because those pages stay charged while /tmp is full: a /tmp as large as the limit would
 * leave sandboxd no memory, and each of its restarts would be killed again.
 *
 * Not a directory of the data volume: that volume is held at its size only where its storage
 * class enforces sizes, outlives the pod (suspend, resume), and may be a directory of a claim
 * shared with other sandboxes. /tmp, like the pod, starts empty on every (re)start.
 */
export function tmpSize(e: Effective): string {
  const half = Math.floor(quantityValue(e.limits.memory) / 2);
  if (half >= 512 * MiB) return "512Mi";
  return half % MiB === 0 ? `${half / MiB}Mi` : String(half);
}

export const newToken = () => randomBytes(32).toString("hex");

export function controllerRef(owner: KObject): OwnerReference {
  return {
    apiVersion: owner.apiVersion!,
    kind: owner.kind!,
    name: owner.metadata.name,
    uid: owner.metadata.uid!,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/**
 * Whether `o` is controlled by another object of `owner`'s kind: for a child found under a name
 * derived from its owner's, one left by a deleted namesake (same name, another uid).
 */
export function controlledByAnother(o: KObject | undefined, owner: KObject): boolean {
  return (
    o?.metadata.ownerReferences?.some(
      (r) => r.controller && r.kind === owner.kind && r.uid !== owner.metadata.uid,
    ) ?? false
  );
}

export interface Meta {
  name: string;
  namespace: string;
  /** The controlling owner; none for what a namespace's sandboxes share (their policies). */
  owner?: KObject;
  labels: Record<string, string>;
}

export const metadata = (m: Meta, annotations?: Record<string, string>) => ({
  name: m.name,
  namespace: m.namespace,
  labels: { [LABEL.managedBy]: MANAGED_BY.operator, [LABEL.name]: "sandpit-sandbox", ...m.labels },
  ...(annotations ? { annotations } : {}),
  ...(m.owner ? { ownerReferences: [controllerRef(m.owner)] } : {}),
});

/**
 * A token Secret: the token, for the provisioner and operator, and its SHA-256, the only form a
 * pod is given. sandboxd verifies with the digest, so the token is in no pod's environment:
 * code in the sandbox can read PID 1's environment (/proc/1/environ), and finds nothing there
 * that opens any sandboxd.
 */
export function tokenSecret(m: Meta, token: string): KObject {
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: metadata(m),
    type: "Opaque",
    immutable: true,
    data: {
      token: Buffer.from(token).toString("base64"),
      [TOKEN_DIGEST_KEY]: Buffer.from(tokenDigest(token)).toString("base64"),
    },
  };
}

/** The token Secret's key holding the digest sandboxd verifies with. */
export const TOKEN_DIGEST_KEY = "token-sha256";

export function tokenDigest(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

/** Whether a token Secret predates the digest: its pods are given the token itself. */
export function legacyTokenSecret(s: { data?: Record<string, string> } | undefined): boolean {
  return Boolean(s?.data?.token && !s.data[TOKEN_DIGEST_KEY]);
}

export function dataClaim(m: Meta, e: Effective): KObject {
  return {
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: metadata(m),
    spec: {
      accessModes: ["ReadWriteOnce"],
      resources: { requests: { storage: e.storage.size } },
      ...(e.storage.storageClassName ? { storageClassName: e.storage.storageClassName } : {}),
    },
  };
}

/**
 * One volume per claim (the user-data volume is "data"), read-only when every mount of it is:
 * the user-data claim can also be mounted elsewhere, read-only or at another subPath.
 */
function claimVolumes(mounts: ClaimMount[]) {
  const names = new Map<string, string>();
  for (const m of mounts) {
    if (!names.has(m.claimName))
      names.set(m.claimName, names.size ? `claim-${names.size}` : "data");
  }
  const volumes = [...names].map(([claimName, name]) => {
    const readOnly = mounts.every((m) => m.claimName !== claimName || m.readOnly);
    return { name, persistentVolumeClaim: { claimName, ...(readOnly ? { readOnly } : {}) } };
  });
  const volumeMounts = mounts.map((m) => ({
    name: names.get(m.claimName)!,
    mountPath: m.mountPath,
    ...(m.readOnly ? { readOnly: true } : {}),
    ...(m.subPath ? { subPath: m.subPath } : {}),
  }));
  return { volumes, volumeMounts };
}

/** The environment variable sandboxd's token (or, almost always, its digest) reaches it by. */
function tokenEnv(token: { secret: string; legacy?: boolean } | { digest: string }) {
  if ("digest" in token) return { name: "SANDBOXD_TOKEN_SHA256", value: token.digest };
  return token.legacy
    ? {
        name: "SANDBOXD_TOKEN",
        valueFrom: { secretKeyRef: { name: token.secret, key: "token" } },
      }
    : {
        name: "SANDBOXD_TOKEN_SHA256",
        valueFrom: { secretKeyRef: { name: token.secret, key: TOKEN_DIGEST_KEY } },
      };
}

/** The pod running sandboxd; `mounts` comes from podMounts (the user-data volume first). */
export function pod(
  m: Meta,
  e: Effective,
  opts: {
    /**
     * Where sandboxd's token comes from: a token Secret (its digest key), or the digest itself
     * as a plain value (a warm pod's own token, derived: no Secret holds it, and the digest opens
     * nothing).
     */
    token: { secret: string; legacy?: boolean } | { digest: string };
    mounts: ClaimMount[];
    annotations?: Record<string, string>;
    /**
     * host:port the pod's network policy refuses (workload/egress.ts policyProbeFor): sandboxd
     * is ready, and so the pod, only once it cannot reach it (sandboxd/src/isolation.ts).
     */
    isolationProbe?: string | undefined;
  },
  cfg: OperatorConfig,
): KObject {
  const claims = claimVolumes(opts.mounts);
  // /readyz adds the policy check to /healthz's; images before it have only /healthz.
  const readyPath = opts.isolationProbe ? "/readyz" : "/healthz";
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: metadata(m, opts.annotations),
    spec: {
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      restartPolicy: "Always",
      terminationGracePeriodSeconds: 5,
      ...(e.runtimeClassName ? { runtimeClassName: e.runtimeClassName } : {}),
      ...(Object.keys(cfg.podNodeSelector).length ? { nodeSelector: cfg.podNodeSelector } : {}),
      ...(cfg.podTolerations.length ? { tolerations: cfg.podTolerations } : {}),
      securityContext: {
        runAsNonRoot: true,
        runAsUser: UID,
        runAsGroup: UID,
        fsGroup: UID,
        fsGroupChangePolicy: "OnRootMismatch",
        seccompProfile: { type: "RuntimeDefault" },
      },
      containers: [
        {
          name: "sandboxd",
          image: e.image,
          imagePullPolicy: cfg.imagePullPolicy,
          // The image's working directory is the workspace on the volume; the runtime would
          // create it as root before sandboxd starts, and sandboxd (uid 1000) could not write it.
          workingDir: VIRTUAL_ROOT,
          ports: [{ name: "sandboxd", containerPort: SANDBOXD_PORT, protocol: "TCP" }],
          env: [
            tokenEnv(opts.token),
            { name: "SANDBOXD_ENV", value: JSON.stringify(e.env) },
            { name: "SANDBOXD_AIO_PATHS", value: "any" }, // a pod: AIO paths reach what bash can
            ...(opts.isolationProbe
              ? [{ name: "SANDBOXD_ISOLATION_PROBE", value: opts.isolationProbe }]
              : []),
          ],
          resources: {
            // A request above its limit is invalid: a small sandbox requests what it may use.
            requests: {
              cpu: smaller(cfg.requests.cpu, e.limits.cpu),
              memory: smaller(cfg.requests.memory, e.limits.memory),
              // Unset, it would default to the limit and reserve the node's disk many times over.
              "ephemeral-storage": smaller(
                cfg.requests.ephemeralStorage,
                e.limits.ephemeralStorage,
              ),
            },
            limits: {
              cpu: e.limits.cpu,
              memory: e.limits.memory,
              "ephemeral-storage": e.limits.ephemeralStorage,
            },
          },
          securityContext: {
            allowPrivilegeEscalation: false,
            privileged: false,
            readOnlyRootFilesystem: true,
            runAsNonRoot: true,
            capabilities: { drop: ["ALL"] },
          },
          readinessProbe: {
            httpGet: { path: readyPath, port: SANDBOXD_PORT },
            periodSeconds: 1,
            failureThreshold: 3,
          },
          livenessProbe: {
            httpGet: { path: "/healthz", port: SANDBOXD_PORT },
            initialDelaySeconds: 10,
            periodSeconds: 10,
            failureThreshold: 6,
          },
          volumeMounts: [
            ...claims.volumeMounts,
            { name: "tmp", mountPath: "/tmp" },
            ...e.emptyDirs.map((mountPath, i) => ({ name: `empty-${i}`, mountPath })),
          ],
        },
      ],
      volumes: [
        ...claims.volumes,
        { name: "tmp", emptyDir: { medium: "Memory", sizeLimit: tmpSize(e) } },
        ...e.emptyDirs.map((_, i) => ({ name: `empty-${i}`, emptyDir: { sizeLimit: "512Mi" } })),
      ],
    },
  };
}
