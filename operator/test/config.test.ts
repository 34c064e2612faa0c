/** The operator's settings: defaults, parsing, and start-up errors that name the variable. */
import { describe, expect, it } from "vitest";
import { readConfig } from "../src/config.ts";

describe("readConfig", () => {
  it("has safe defaults", () => {
    const c = readConfig({});
    expect(c).toMatchObject({
      kubeconfig: undefined,
      watchNamespace: undefined,
      systemNamespace: "sandpit-system",
      imagePullPolicy: "IfNotPresent",
      defaultTtlSeconds: 24 * 3600,
      defaultLimits: { cpu: "1", memory: "1Gi", ephemeralStorage: "2Gi" },
      requests: { cpu: "50m", memory: "64Mi", ephemeralStorage: "64Mi" },
      dnsCidrs: [],
      egressExcludeCidrs: [],
      podNodeSelector: {},
      podTolerations: [],
      maxRecreations: 5,
      sandboxWorkers: 32,
      poolWorkers: 4,
      probeAddress: "0.0.0.0:8081",
      logLevel: "info",
      leaderElection: {
        enabled: true,
        namespace: "sandpit-system",
        name: "sandpit-operator",
        leaseDurationMs: 15_000,
        renewDeadlineMs: 10_000,
        retryPeriodMs: 2_000,
      },
    });
    expect(c.image).toBeTruthy();
    expect(c.leaderElection.identity).toMatch(/\S/);
  });

  it("parses what is set", () => {
    const c = readConfig({
      SANDPIT_SYSTEM_NAMESPACE: "sys",
      SANDPIT_DEFAULT_TTL_SECONDS: "600",
      SANDPIT_DNS_CIDRS: " 10.96.0.10/32 , fd00::a/128,",
      SANDPIT_POD_NODE_SELECTOR: '{"role":"sandbox"}',
      SANDPIT_POD_TOLERATIONS: '[{"key":"k","operator":"Equal","value":"v","effect":"NoExecute"}]',
      SANDPIT_LEADER_ELECTION: "false",
      SANDPIT_IDENTITY: "op-1",
      SANDPIT_SANDBOX_WORKERS: "8",
      SANDPIT_EGRESS_EXCLUDE_CIDRS: "192.0.2.2/32, 203.0.113.0/24",
      UNRELATED: "ignored",
    });
    expect(c.systemNamespace).toBe("sys");
    expect(c.defaultTtlSeconds).toBe(600);
    expect(c.dnsCidrs).toEqual(["10.96.0.10/32", "fd00::a/128"]);
    expect(c.podNodeSelector).toEqual({ role: "sandbox" });
    expect(c.podTolerations).toEqual([
      { key: "k", operator: "Equal", value: "v", effect: "NoExecute" },
    ]);
    expect(c.leaderElection).toMatchObject({ enabled: false, namespace: "sys", identity: "op-1" });
    expect(c.sandboxWorkers).toBe(8);
    expect(c.egressExcludeCidrs).toEqual(["192.0.2.2/32", "203.0.113.0/24"]);
  });

  it.each([
    ["SANDPIT_DEFAULT_TTL_SECONDS", "5"],
    ["SANDPIT_DEFAULT_TTL_SECONDS", "a day"],
    ["SANDPIT_POD_TOLERATIONS", "not-json"],
    ["SANDPIT_POD_TOLERATIONS", '[{"operator":"Sometimes"}]'],
    ["SANDPIT_POD_NODE_SELECTOR", '{"a":1}'],
    ["SANDPIT_IMAGE_PULL_POLICY", "Sometimes"],
    ["SANDPIT_LEADER_ELECTION", "yes"],
    ["SANDPIT_PROBE_ADDRESS", "8081"],
    ["SANDPIT_SANDBOX_WORKERS", "0"],
    ["SANDPIT_LOG_LEVEL", "loud"],
    ["SANDPIT_EGRESS_EXCLUDE_CIDRS", "192.0.2.2"],
    ["SANDPIT_EGRESS_EXCLUDE_CIDRS", "fd00::/8"],
    ["SANDPIT_EGRESS_EXCLUDE_CIDRS", "192.0.2.0/33"],
    ["SANDPIT_EGRESS_EXCLUDE_CIDRS", "0.0.0.0/0"],
  ])("rejects %s=%s with an error naming it", (name, value) => {
    expect(() => readConfig({ [name]: value })).toThrow(
      new RegExp(`invalid operator settings:[\\s\\S]*${name}:`),
    );
  });

  it("names every bad variable at once", () => {
    let message = "";
    try {
      readConfig({ SANDPIT_DEFAULT_TTL_SECONDS: "5", SANDPIT_POD_TOLERATIONS: "not-json" });
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toContain("SANDPIT_DEFAULT_TTL_SECONDS");
    expect(message).toContain("SANDPIT_POD_TOLERATIONS: must be JSON");
  });
});
