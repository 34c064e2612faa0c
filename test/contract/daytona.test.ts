/**
 * The contract suite on the Daytona provider, through the real `@daytonaio/sdk`, against the
 * loopback Daytona fake (test/fakes/daytona.ts), whose sandboxes run real processes in
 * bubblewrap. Without bubblewrap the run is reported as skipped (and fails in CI).
 */
import { DaytonaProvider } from "@sandpit/sdk/daytona";
import { FakeDaytona } from "../fakes/daytona.ts";
import { bwrapUsable } from "../fakes/sandbox-host.ts";
import { contractSuite } from "./suite.ts";

if (!(await bwrapUsable())) {
  if (process.env.CI)
    throw new Error("bubblewrap must be installed in CI (apt-get install bubblewrap)");
  console.warn(
    "bubblewrap is not available: skipping the Daytona contract run (its fake runs sandboxes in bubblewrap)",
  );
} else {
  contractSuite("daytona (loopback fake)", async () => {
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
  });
}
