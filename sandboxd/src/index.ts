/** sandboxd as a library: start it in-process (tests, benchmarks) or through main.ts. */
export * from "./protocol.ts";
export { startSandboxd, type RunningSandboxd } from "./start.ts";
export { PathJail } from "./jail.ts";
export { readSettings, type Settings } from "./config.ts";
export { scrubEnv, discoverInterpreters, type Interpreters } from "./environment.ts";
export { RUNNERS_DIR, RUNNERS } from "./runners.ts";
