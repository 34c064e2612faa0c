import { defineConfig } from "vitest/config";

// Two projects: "core" needs nothing but this machine; "docker" gets a real Docker engine and
// the sandbox image from its global setup (installing and starting them when missing). Files run
// two at a time (2 cores) with generous timeouts: suites start real processes and containers.
export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 180_000,
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        test: {
          name: "core",
          sequence: { groupOrder: 0 },
          include: ["{sandboxd,sdk,cli,test,operator,provisioner}/**/*.test.ts"],
          exclude: [
            "**/node_modules/**",
            "test/docker/**",
            "test/contract/docker.test.ts",
            "test/contract/kubernetes.test.ts",
            "test/contract/e2b-sandpit.test.ts",
            "test/provisioner/**",
            "test/cluster/**",
            "test/chart/**",
            "test/operator/**",
            "test/deerflow/**",
            "test/security/**",
            "test/chaos/**",
            "test/serve/docker*.test.ts",
          ],
        },
      },
      {
        extends: true,
        test: {
          name: "docker",
          sequence: { groupOrder: 0 },
          include: [
            "test/docker/**/*.test.ts",
            "test/contract/docker.test.ts",
            "test/serve/docker*.test.ts",
          ],
          globalSetup: ["test/docker/global-setup.ts"],
          // Image builds and container starts are slow; the cold first build takes minutes.
          hookTimeout: 900_000,
        },
      },
      {
        extends: true,
        test: {
          name: "cluster",
          include: [
            "test/cluster/**/*.test.ts",
            "test/chart/**/*.test.ts",
            "test/operator/**/*.test.ts",
            "test/provisioner/**/*.test.ts",
            "test/contract/kubernetes.test.ts",
            "test/contract/e2b-sandpit.test.ts",
            "test/deerflow/**/*.test.ts",
            "test/security/**/*.test.ts",
            // Those that kill and restart only the processes they start themselves (the node's
            // own components are node.test.ts's, excluded below).
            "test/chaos/**/*.test.ts",
          ],
          exclude: [
            "**/node_modules/**",
            "test/operator/disruptive/**",
            "test/security/load.test.ts",
            "test/chaos/node.test.ts",
          ],
          globalSetup: ["test/cluster/global-setup.ts"],
          hookTimeout: 900_000,
          sequence: { groupOrder: 0 },
        },
      },
      {
        // Restarts the API server and kills operators, kills the node's own components (etcd,
        // containerd, the kubelet) and reboots the node, or takes the whole node (1,000 commands
        // in 50 sandboxes): runs alone, after every other project, so that it neither disturbs
        // the suites that time their waits nor is disturbed by them.
        extends: true,
        test: {
          name: "cluster-disruptive",
          include: [
            "test/operator/disruptive/**/*.test.ts",
            "test/security/load.test.ts",
            "test/chaos/node.test.ts",
          ],
          globalSetup: ["test/cluster/global-setup.ts"],
          hookTimeout: 900_000,
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
