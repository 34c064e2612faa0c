/**
 * What one cold Sandbox costs the API server, counted by the operator itself
 * (sandpit_api_writes_total, successful non-GET requests; events and lease renewals apart):
 * each child written once, created with its final labels and owner, and the status written
 * once per transition it shows: Ready, plus Starting only when the start is slow enough to
 * report (lifecycle.ts, QUIET_START_MS), its progress at most every 10 s (status.ts). The network policies are the namespace's: the first
 * sandbox makes them, the next ones write none.
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

/** The writes since `before`, by "resource VERB", zeros left out. */
const since = (before: Record<string, number>, now: Record<string, number>) =>
  Object.fromEntries(
    Object.entries(now)
      .map(([k, n]) => [k, n - (before[k] ?? 0)] as const)
      .filter(([, n]) => n > 0),
  );

/**
 * An Allowlist network: its egress policy does not depend on the cluster's addresses, which
 * other suites change meanwhile (egress.test.ts adds a Node), and an Internet policy follows.
 */
const NETWORK = { egress: "Allowlist", allow: [{ cidr: "203.0.113.0/24", ports: [443] }] };

/** Creates a cold sandbox, waits until it is Ready and the operator stopped writing. */
async function coldStart(name: string): Promise<Record<string, number>> {
  const before = await writes();
  await sandboxes.create(c, ns, name, { network: NETWORK });
  await waitForPhase(c, ns, name, "Ready");
  // Quiet for 3 s: whatever the operator writes after Ready has been written.
  let last = "";
  let quietFrom = performance.now();
  await waitFor(
    "the operator to stop writing",
    60_000,
    async () => {
      const now = JSON.stringify(await writes());
      if (now !== last) [last, quietFrom] = [now, performance.now()];
      return performance.now() - quietFrom >= 3_000;
    },
    250,
  );
  return since(before, await writes());
}

/**
 * Ready, and before it Starting only when the start took long enough to be reported (3 s; on a
 * loaded machine it may), its progress then at most once per 10 s: one write per transition
 * shown.
 */
async function expectStatusWrites(name: string, n: number | undefined) {
  const s = await sandboxes.get(c, ns, name);
  const startS =
    (Date.parse(s.status!.readyAt!) - Date.parse(s.metadata.creationTimestamp!)) / 1000;
  // Timestamps are whole seconds: a second either way.
  const starting = startS + 1 >= 3 ? 1 + Math.floor(Math.max(0, startS + 1 - 3) / 10) : 0;
  expect(n).toBeGreaterThanOrEqual(1);
  expect(n, `a start of ${startS} s`).toBeLessThanOrEqual(1 + starting);
}

describe("API writes of a cold sandbox", () => {
  test("each child is written once, the status once per transition, the namespace's policies once", async () => {
    expect(await writes()).toEqual({});
    // The first sandbox of the namespace makes its isolation policy and its network's egress
    // policy.
    const { "sandboxes/status PATCH": firstStatus, ...first } = await coldStart("cold");
    expect(first).toEqual({
      "secrets POST": 1,
      "networkpolicies PATCH": 2,
      "persistentvolumeclaims POST": 1,
      "pods PATCH": 1,
    });
    await expectStatusWrites("cold", firstStatus);
    // Each one after it, of the same network, writes its own children alone: 4 writes in all.
    const { "sandboxes/status PATCH": status, ...children } = await coldStart("cold-2");
    expect(children).toEqual({
      "secrets POST": 1,
      "persistentvolumeclaims POST": 1,
      "pods PATCH": 1,
    });
    await expectStatusWrites("cold-2", status);
  });
});
