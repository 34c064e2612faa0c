export { readConfig, type ProvisionerConfig, type ApiKey } from "./config.ts";
export { createApp } from "./server.ts";
export { SandboxStore } from "./sandboxes.ts";
