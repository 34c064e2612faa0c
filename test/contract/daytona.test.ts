/**
 * The contract suite on the Daytona provider, through the real `@daytonaio/sdk`, against the
 * loopback Daytona fake (test/fakes/daytona.ts), whose sandboxes run real processes in
 * bubblewrap. Without bubblewrap the run is reported as skipped (and fails in CI).
 */
import { DaytonaProvider } from "@sandpit/sdk/daytona";
import { FakeDaytona } from "../fakes/daytona.ts";
import { bwrapUsable } from "../fakes/sandbox-host.ts";
import { contractSuite } from "./suite.ts";

const bwrap = await bwrapUsable();
if (!bwrap && process.env.CI)
  throw new Error("bubblewrap must be installed in CI (apt-get install bubblewrap)");

contractSuite(
  "daytona (loopback fake)",
  async () => {
    const fake = new FakeDaytona();
    await fake.start();
    const provider = new DaytonaProvider({
      apiKey: fake.apiKey,
      apiUrl: fake.apiUrl,
      target: "us",
      // The fake serves no event socket; the SDK polls sandbox state instead.
      useDeprecatedPolling: true,
    });
    return { provider, teardown: () => fake.close() };
  },
  {
    lacks: [
      // Daytona's interpreter (`codeInterpreter`) is Python-only and answers a cell with stdout,
      // stderr and an error alone: no last-expression value, no display() results, no interrupt
      // but its timeout (see sdk/README.md).
      "codeContexts",
      "richResults",
      // The daemon sends a terminal's output to the clients attached at the moment and keeps
      // none for a later one.
      "ptyReplay",
      // The toolbox has no directory watch.
      "watch",
      // The toolbox has no call that ends a session command's stdin (only one that writes to it).
      "closeStdin",
      // Daytona documents no limit on sessions or commands per sandbox (its resources are the
      // bound), so there is no CAPACITY_EXCEEDED to expect.
      "limits",
    ],
    platform: {
      provider: "daytona",
      // ttlMinutes and autoStopInterval, in whole minutes.
      ttl: true,
      idleTimeout: true,
      // Daytona sizes only sandboxes built from an image; this provider creates from snapshots.
      cpu: false,
      memory: false,
      disk: false,
      template: true,
      networkDeny: true,
      networkInternet: true,
      networkAllow: true,
      // Daytona volumes are not wired to mounts.
      mounts: false,
      // Daytona does not report when a sandbox's TTL ends.
      expiresAt: false,
      // The fake records lifetimes and network settings; it enforces neither.
      ttlEnforced: false,
      memoryEnforced: false,
      isolationVisible: false,
    },
    skipReason: bwrap
      ? undefined
      : "bubblewrap is not available on this machine (the Daytona fake runs sandboxes in it)",
  },
);
