export { readConfig, type OperatorConfig } from "./config.ts";
export { Manager } from "./manager.ts";
