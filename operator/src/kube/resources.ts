/** The core kinds Sandpit reads and writes, and the parts of their shapes it reads. */
import type { KObject, Resource } from "./rest.ts";

export const PODS: Resource = { group: "", version: "v1", plural: "pods", kind: "Pod" };
export const SERVICES: Resource = { group: "", version: "v1", plural: "services", kind: "Service" };
export const PVCS: Resource = {
  group: "",
  version: "v1",
  plural: "persistentvolumeclaims",
  kind: "PersistentVolumeClaim",
};
export const SECRETS: Resource = { group: "", version: "v1", plural: "secrets", kind: "Secret" };
/** Core Events: read only for what the kubelet said about a pod it ended (sandbox/lifecycle.ts). */
export const CORE_EVENTS: Resource = { group: "", version: "v1", plural: "events", kind: "Event" };
/** A core Event, the fields read. */
export interface CoreEvent extends KObject {
  type?: string;
  reason?: string;
  message?: string;
  source?: { component?: string };
  lastTimestamp?: string;
  eventTime?: string;
}
export const NETWORK_POLICIES: Resource = {
  group: "networking.k8s.io",
  version: "v1",
  plural: "networkpolicies",
  kind: "NetworkPolicy",
};

/** A Pod as the cache keeps it (kube/transforms.ts): no spec, the status fields read. */
export interface Pod extends KObject {
  status?: {
    phase?: string;
    podIP?: string;
    reason?: string;
    message?: string;
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
    containerStatuses?: {
      restartCount: number;
      ready?: boolean;
      state?: {
        running?: { startedAt?: string };
        waiting?: { reason?: string; message?: string };
        terminated?: { reason?: string; exitCode?: number; message?: string; finishedAt?: string };
      };
      lastState?: { terminated?: { reason?: string; exitCode?: number } };
    }[];
  };
}
export interface Claim extends KObject {
  spec?: { storageClassName?: string };
  status?: { phase?: string };
}

/** StorageClasses: read for whether a sandbox's volume holds its size (workload/disk.ts). */
export const STORAGE_CLASSES: Resource = {
  group: "storage.k8s.io",
  version: "v1",
  plural: "storageclasses",
  kind: "StorageClass",
};
/** A StorageClass as the cache keeps it: its provisioner and the two annotations read. */
export interface StorageClass extends KObject {
  provisioner?: string;
}
export interface Secret extends KObject {
  data?: Record<string, string>;
}

/** Nodes and the API server's EndpointSlices: read for the addresses egress must exclude. */
export const NODES: Resource = { group: "", version: "v1", plural: "nodes", kind: "Node" };
export const ENDPOINT_SLICES: Resource = {
  group: "discovery.k8s.io",
  version: "v1",
  plural: "endpointslices",
  kind: "EndpointSlice",
};
/** A Node as the cache keeps it (kube/transforms.ts): its InternalIP and ExternalIP addresses. */
export interface Node extends KObject {
  status?: { addresses?: { type: string; address: string }[] };
}
/** An EndpointSlice as the cache keeps it: its endpoints' addresses and its ports' numbers. */
export interface EndpointSlice extends KObject {
  endpoints?: { addresses: string[] }[];
  ports?: { port?: number }[];
}
