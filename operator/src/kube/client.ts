/**
 * The Kubernetes client Sandpit is built on, as other components import it
 * (`@sandpit/operator/kube/client`): the REST client, informer caches and the core kinds. It
 * knows nothing of the operator: who it writes as and what it counts are the caller's options.
 */
export * from "./rest.ts";
export { type Handler, Informer, type InformerOptions } from "./informer.ts";
export * from "./resources.ts";
