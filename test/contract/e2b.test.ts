/**
 * The contract suite on the E2B provider, through the real `e2b` / `@e2b/code-interpreter`
 * SDKs, against the loopback E2B fake (test/fakes/e2b.ts), whose sandboxes run real processes
 * in bubblewrap. Without bubblewrap the run is reported as skipped (and fails in CI).
 */
import { E2BProvider } from "@sandpit/sdk/e2b";
import { FakeE2B } from "../fakes/e2b.ts";
import { bwrapUsable } from "../fakes/sandbox-host.ts";
import { contractSuite } from "./suite.ts";

const bwrap = await bwrapUsable();
if (!bwrap && process.env.CI)
  throw new Error("bubblewrap must be installed in CI (apt-get install bubblewrap)");

contractSuite(
  "e2b (loopback fake)",
  async () => {
    const fake = new FakeE2B();
    const url = await fake.start();
    const provider = new E2BProvider({
      apiKey: fake.apiKey,
      apiUrl: url,
      sandboxUrl: url,
      domain: "sandbox.test",
      // The fake's sandboxes share the host network, so their ports are on 127.0.0.1.
      hostTemplate: "127.0.0.1:{port}",
    });
    // Everything through the SDK's native calls (glob/grep and append run in the sandbox).
    return { provider, teardown: () => fake.close() };
  },
  {
    lacks: [
      // envd streams a process's output from the moment a client connects and keeps none, and
      // it forgets a process once it exits (no exit code to list or connect to later).
      "replay",
      "ptyReplay",
      // E2B documents no limit on processes, terminals or interpreter contexts per sandbox
      // (memory is the bound), so there is no CAPACITY_EXCEEDED to expect.
      "limits",
    ],
    platform: {
      provider: "e2b",
      // The sandbox timeout is the lifetime; E2B has no idle timeout of its own.
      ttl: true,
      idleTimeout: false,
      // Compute is the template's.
      cpu: false,
      memory: false,
      disk: false,
      template: true,
      networkDeny: true,
      networkInternet: true,
      networkAllow: true,
      // E2B volumes are not wired to mounts.
      mounts: false,
      expiresAt: true,
      // The fake records lifetimes and network settings; it enforces neither.
      ttlEnforced: false,
      memoryEnforced: false,
      isolationVisible: false,
    },
    skipReason: bwrap
      ? undefined
      : "bubblewrap is not available on this machine (the E2B fake runs sandboxes in it)",
  },
);
