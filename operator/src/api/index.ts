/**
 * The `sandpit.dev/v1alpha1` API as clients import it (`@sandpit/operator/api`): the object
 * types and their schemas, where they live, the label vocabulary, the names of a sandbox's
 * objects and the value rules. Nothing of the controllers lies behind this door.
 */
export * from "./v1alpha1.ts";
export * from "./labels.ts";
export * from "./names.ts";
export * from "./rules.ts";
export * from "./bounds.ts";
export * from "./packages.ts";
export * from "./reservations.ts";
