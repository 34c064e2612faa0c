/**
 * What one cold Sandbox costs the API server, counted by the operator itself
 * (sandpit_api_writes_total, successful non-GET requests; events and lease renewals apart):
 * each child written once, created with its final labels and owner, and the status written
 * once per transition it shows: Ready, plus Starting only when the start is slow enough to
 * report (lifecycle.ts, QUIET_START_MS).
 */
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type Clients,
  type OperatorProcess,
  clients,
  createNamespace,
  deleteNamespace,
  ensureCrds,
  sandboxes,
  startOperator,
  waitFor,
  waitForPhase,
} from "../cluster/harness.ts";

let c: Clients;
let ns: string;
let operator: OperatorProcess;

beforeAll(async () => {
  c = clients(inject("kubeconfig"));
  await ensureCrds(c);
  ns = await createNamespace(c, "op-writes");
  operator = await startOperator({
    kubeconfig: inject("kubeconfig"),
    namespace: ns,
    image: inject("clusterSandboxImage"),
  });
});

afterAll(async () => {
  await operator?.stop();
  if (ns) await deleteNamespace(c, ns);
});

/** sandpit_api_writes_total as "resource VERB" → count, events and leases apart. */
async function writes(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const line of (await operator.metrics()).split("\n")) {
    if (!line.startsWith("sandpit_api_writes_total{")) continue;
    const resource = /resource="([^"]*)"/.exec(line)![1]!;
    const verb = /verb="([^"]*)"/.exec(line)![1]!;
    if (resource === "events" || resource === "leases") continue;
    out[`${resource} ${verb}`] = Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return out;
}

describe("API writes of a cold sandbox", () => {
  test("each child is written once and the status once per transition", async () => {
    expect(await writes()).toEqual({});
    await sandboxes.create(c, ns, "cold", {});
    await waitForPhase(c, ns, "cold", "Ready");
    // Quiet for 3 s: whatever the operator writes after Ready has been written.
    let last = "";
    let since = performance.now();
    await waitFor(
      "the operator to stop writing",
      60_000,
      async () => {
        const now = JSON.stringify(await writes());
        if (now !== last) [last, since] = [now, performance.now()];
        return performance.now() - since >= 3_000;
      },
      250,
    );
    const counted = await writes();
    const { "sandboxes/status PATCH": status = 0, ...children } = counted;
    expect(children).toEqual({
      "secrets POST": 1,
      "networkpolicies PATCH": 1,
      "persistentvolumeclaims POST": 1,
      "pods PATCH": 1,
    });
    // Ready, and before it Starting only when the start took long enough to be reported (on a
    // loaded machine it may): one write per transition shown.
    expect(status).toBeGreaterThanOrEqual(1);
    expect(status).toBeLessThanOrEqual(2);
  });
});
