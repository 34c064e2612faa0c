export * from "./api/v1alpha1.ts";
export { readConfig, type OperatorConfig } from "./config.ts";
export { Manager } from "./manager.ts";
