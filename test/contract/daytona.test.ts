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
    return {
      provider,
      teardown: () => fake.close(),
      // Not implemented on Daytona yet (the SDK's PTY and its Python interpreter with
      // contexts; see sdk/README.md); the toolbox has no directory watch.
      supports: {
        pty: false,
        codeContexts: false,
        richResults: false,
        watch: false,
      },
    };
  },
  bwrap
    ? undefined
    : "bubblewrap is not available on this machine (the Daytona fake runs sandboxes in it)",
);
