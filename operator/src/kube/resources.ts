/** The kinds the operator reads and writes. */
import { GROUP, VERSION } from "../api/v1alpha1.ts";
import type { Resource } from "./client.ts";

export const SANDBOXES: Resource = {
  group: GROUP,
  version: VERSION,
  plural: "sandboxes",
  kind: "Sandbox",
};
export const POOLS: Resource = {
  group: GROUP,
  version: VERSION,
  plural: "sandboxpools",
  kind: "SandboxPool",
};
export const PODS: Resource = { group: "", version: "v1", plural: "pods", kind: "Pod" };
export const SERVICES: Resource = { group: "", version: "v1", plural: "services", kind: "Service" };
export const PVCS: Resource = {
  group: "",
  version: "v1",
  plural: "persistentvolumeclaims",
  kind: "PersistentVolumeClaim",
};
export const SECRETS: Resource = { group: "", version: "v1", plural: "secrets", kind: "Secret" };
export const NETWORK_POLICIES: Resource = {
  group: "networking.k8s.io",
  version: "v1",
  plural: "networkpolicies",
  kind: "NetworkPolicy",
};
