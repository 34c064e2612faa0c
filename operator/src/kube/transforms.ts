/**
 * What the informer caches keep of each object: the fields the reconcilers read, nothing else
 * (controller-runtime's cache transforms). A Pod as the API server sends it is ~10 KB of JSON
 * (managedFields alone 4 KB, spec 3 KB); the operator reads its labels, owner, a few annotations
 * and a dozen status fields. At 10,000 sandboxes, with five children each, that difference is
 * the operator's memory.
 *
 * Each transform builds a new object rather than deleting fields from the parsed one: V8 turns
 * an object whose properties were deleted into a dictionary, which costs more than it saved.
 * What a reconciler reads from a cached object must be listed here; the transform test
 * (operator/test/transforms.test.ts) reconciles sandboxes from transformed objects only.
 */
import type { Sandbox, SandboxPool } from "../api/v1alpha1.ts";
import type { Claim, EndpointSlice, Node, Pod, Secret, StorageClass } from "./resources.ts";
import type { KObject, ObjectMeta, OwnerReference } from "./rest.ts";
import { TOKEN_DIGEST_KEY } from "../workload/manifests.ts";

export type Transform<T extends KObject = KObject> = (o: T) => T;

/** Annotations of others (kubectl's last-applied copy of the object, say) are not ours to read. */
const OURS = "sandpit.dev/";

function ownerRefs(refs: OwnerReference[] | undefined): OwnerReference[] | undefined {
  return refs?.map((r) => ({
    apiVersion: r.apiVersion,
    kind: r.kind,
    name: r.name,
    uid: r.uid,
    ...(r.controller ? { controller: true } : {}),
  }));
}

function ourAnnotations(a: Record<string, string> | undefined) {
  if (!a) return undefined;
  let out: Record<string, string> | undefined;
  for (const k in a) if (k.startsWith(OURS)) (out ??= {})[k] = a[k]!;
  return out;
}

/** The metadata every reconciler may read; labels whole (they are what selects children). */
export function meta(m: ObjectMeta, annotations = ourAnnotations(m.annotations)): ObjectMeta {
  return {
    name: m.name,
    namespace: m.namespace,
    uid: m.uid,
    resourceVersion: m.resourceVersion,
    generation: m.generation,
    creationTimestamp: m.creationTimestamp,
    deletionTimestamp: m.deletionTimestamp,
    labels: m.labels,
    annotations,
    ownerReferences: ownerRefs(m.ownerReferences),
  };
}

const head = (o: KObject) => ({ apiVersion: o.apiVersion, kind: o.kind });

/** Children whose existence, owner and spec-hash annotation are all that is read. */
export const metadataOnly: Transform = (o) => ({ ...head(o), metadata: meta(o.metadata) });

/** Sandboxes and pools: spec and status whole (every field is the reconcilers'). */
export function specAndStatus<T extends Sandbox | SandboxPool>(o: T): T {
  return {
    ...head(o),
    metadata: meta(
      o.metadata,
      o.metadata.annotations && withoutLastApplied(o.metadata.annotations),
    ),
    spec: o.spec,
    status: o.status,
  } as T;
}

function withoutLastApplied(a: Record<string, string>): Record<string, string> {
  const key = "kubectl.kubernetes.io/last-applied-configuration";
  if (!(key in a)) return a;
  const { [key]: _dropped, ...rest } = a;
  return rest;
}

/** The status fields pod-state.ts and the reconcilers read; the spec is never read back. */
export const pod: Transform<Pod> = (o) => {
  const s = o.status;
  const c = s?.containerStatuses?.[0];
  return {
    ...head(o),
    metadata: meta(o.metadata),
    status: s && {
      phase: s.phase,
      podIP: s.podIP,
      reason: s.reason,
      message: s.message,
      conditions: s.conditions?.map((x) => ({
        type: x.type,
        status: x.status,
        reason: x.reason,
        message: x.message,
      })),
      // The operator runs one container per pod: the first is sandboxd.
      containerStatuses: c && [
        {
          restartCount: c.restartCount,
          ready: c.ready,
          state: c.state && {
            running: c.state.running && { startedAt: c.state.running.startedAt },
            waiting: c.state.waiting && {
              reason: c.state.waiting.reason,
              message: c.state.waiting.message,
            },
            terminated: c.state.terminated && {
              reason: c.state.terminated.reason,
              exitCode: c.state.terminated.exitCode,
              message: c.state.terminated.message,
              finishedAt: c.state.terminated.finishedAt,
            },
          },
          lastState: c.lastState?.terminated && {
            terminated: {
              reason: c.lastState.terminated.reason,
              exitCode: c.lastState.terminated.exitCode,
            },
          },
        },
      ],
    },
  };
};

/**
 * Class names, one string per class however many claims name it: a cluster has a handful of
 * classes and may have 10,000 claims.
 */
const classNames = new Map<string, string>();
function interned(name: string): string {
  let s = classNames.get(name);
  if (s === undefined) {
    if (classNames.size > 1_000) classNames.clear(); // never a leak, whatever is thrown at it
    classNames.set(name, (s = name));
  }
  return s;
}

/**
 * Whether the claim is Bound is all that is read of its status; of its spec, the class it was
 * given (the default class is filled in by the API server), whose enforcement the Sandbox reports.
 */
export const claim: Transform<Claim> = (o) => {
  const cls = o.spec?.storageClassName;
  return {
    ...head(o),
    metadata: meta(o.metadata),
    ...(cls !== undefined ? { spec: { storageClassName: interned(cls) } } : {}),
    status: o.status && { phase: o.status.phase },
  };
};

/**
 * Our Secrets: a token (a sandbox's own, or a pool's warm one from before warm tokens were per
 * pod) and whether it has its digest, or
 * the key reserved sandboxes' tokens derive from (operator/src/api/reservations.ts), nothing else.
 */
export const secret: Transform<Secret> = (o) => {
  const { token, key, [TOKEN_DIGEST_KEY]: digest } = o.data ?? {};
  const data = {
    ...(token ? { token } : {}),
    ...(digest ? { [TOKEN_DIGEST_KEY]: digest } : {}),
    ...(key ? { key } : {}),
  };
  return {
    ...head(o),
    metadata: meta(o.metadata),
    ...(Object.keys(data).length ? { data } : {}),
  };
};

/** Cluster-scoped and others' objects: only what identifies them in the cache. */
const bareMeta = (m: ObjectMeta): ObjectMeta => ({
  name: m.name,
  ...(m.namespace ? { namespace: m.namespace } : {}),
  uid: m.uid,
  resourceVersion: m.resourceVersion,
});

/**
 * A Node: the addresses a pod could reach it at (InternalIP, ExternalIP), nothing else. A Node
 * as sent is 5 to 20 KB (images, conditions, capacity); the egress rules read two fields.
 */
export const node: Transform<Node> = (o) => ({
  ...head(o),
  metadata: bareMeta(o.metadata),
  status: {
    addresses: (o.status?.addresses ?? [])
      .filter((a) => a.type === "InternalIP" || a.type === "ExternalIP")
      .map((a) => ({ type: a.type, address: a.address })),
  },
});

/** The default-class annotation (the API server's) and ours: all that is read of a class. */
const CLASS_ANNOTATIONS = [
  "storageclass.kubernetes.io/is-default-class",
  "storageclass.beta.kubernetes.io/is-default-class",
  "sandpit.dev/enforces-capacity",
];

/**
 * A StorageClass: its name, age (the newest default class is the default), provisioner and the
 * annotations that say whether it is the default and whether it enforces a claim's size.
 */
export const storageClass: Transform<StorageClass> = (o) => {
  let annotations: Record<string, string> | undefined;
  for (const k of CLASS_ANNOTATIONS) {
    const v = o.metadata.annotations?.[k];
    if (v !== undefined) (annotations ??= {})[k] = v;
  }
  return {
    ...head(o),
    metadata: {
      ...bareMeta(o.metadata),
      creationTimestamp: o.metadata.creationTimestamp,
      ...(annotations ? { annotations } : {}),
    },
    ...(o.provisioner !== undefined ? { provisioner: o.provisioner } : {}),
  };
};

/**
 * An EndpointSlice of the API server: its endpoints' addresses and its ports' numbers, nothing
 * else (an IPv6 or FQDN address is skipped where they are read, workload/egress.ts).
 */
export const endpointSlice: Transform<EndpointSlice> = (o) => ({
  ...head(o),
  metadata: bareMeta(o.metadata),
  endpoints: (o.endpoints ?? []).map((e) => ({ addresses: [...e.addresses] })),
  ports: (o.ports ?? []).map((p) => ({ port: p.port })),
});
