/** The SDK's default logger: warnings and errors to stderr, one line each; never stdout. */
import { afterEach, describe, expect, it, vi } from "vitest";
import { stderrLogger } from "../src/logger.ts";

afterEach(() => vi.restoreAllMocks());

function capture() {
  const out = vi.spyOn(process.stdout, "write").mockImplementation(() => true);
  const err = vi.spyOn(process.stderr, "write").mockImplementation(() => true);
  return { out, lines: () => err.mock.calls.map((c) => String(c[0])) };
}

describe("stderrLogger", () => {
  it("writes warnings and errors to stderr, nothing below warn, nothing to stdout", () => {
    const { out, lines } = capture();
    const log = stderrLogger("warn");
    log.debug("d");
    log.info({ a: 1 }, "i");
    log.warn({ provider: "kubernetes", err: new Error("refused") }, "falling back");
    log.error("broken");
    expect(lines()).toEqual([
      "sandpit warn: falling back (provider=kubernetes, err=refused)\n",
      "sandpit error: broken\n",
    ]);
    expect(out).not.toHaveBeenCalled();
  });

  it("adds a child's bindings to its lines and honours the level it was made with", () => {
    const { lines } = capture();
    const child = stderrLogger("debug").child({ provider: "local" });
    child.debug({ sandboxId: "s1" }, "started");
    stderrLogger("silent").error("never");
    expect(lines()).toEqual(["sandpit debug: started (provider=local, sandboxId=s1)\n"]);
  });

  it("takes its level from SANDPIT_LOG_LEVEL, warn when unset or unknown", () => {
    const { lines } = capture();
    vi.stubEnv("SANDPIT_LOG_LEVEL", "error");
    stderrLogger().warn("hidden");
    vi.stubEnv("SANDPIT_LOG_LEVEL", "loud");
    stderrLogger().info("hidden too");
    stderrLogger().warn("shown");
    vi.unstubAllEnvs();
    expect(lines()).toEqual(["sandpit warn: shown\n"]);
  });
});
