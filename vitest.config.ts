import { defineConfig } from "vitest/config";

// One runner for every workspace. Suites that start real processes (sandboxd, bubblewrap)
// are slow on a 2-core machine, so files run two at a time and tests get generous timeouts.
export default defineConfig({
  test: {
    include: ["{runtime,sdk,test,operator,provisioner}/**/*.test.ts"],
    exclude: ["**/node_modules/**"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    maxWorkers: 2,
    reporters: ["default"],
  },
});
