/**
 * A reconciler's context for unit tests: caches that are plain maps the test can change, and an
 * API client that records every write and makes none.
 */
import { pino } from "pino";
import { readConfig } from "../src/config.ts";
import { type Ctx, Expectations } from "../src/context.ts";
import type { KObject, Resource } from "../src/kube/rest.ts";

export class FakeInformer<T extends KObject> {
  readonly objects = new Map<string, T>();
  constructor(objects: T[] = []) {
    for (const o of objects) this.objects.set(o.metadata.name, o);
  }
  get(name: string): T | undefined {
    return this.objects.get(name);
  }
  list(): T[] {
    return [...this.objects.values()];
  }
}

export type Write = [verb: string, plural: string, ...args: unknown[]];

/**
 * An API client that makes no request: each write goes to `onWrite`, and is answered with what
 * `onWrite` returns, else the object it was given.
 */
export function recordingKube(onWrite: (w: Write) => KObject | void): Ctx["kube"] {
  const record =
    (verb: string) =>
    async (r: Resource, ...args: unknown[]): Promise<KObject> => {
      const answer = onWrite([verb, r.plural, ...args]);
      const o = args.find((a) => typeof a === "object" && a && "metadata" in a) as KObject;
      return answer ?? o ?? { metadata: { name: "x" } };
    };
  return {
    create: record("create"),
    apply: record("apply"),
    patch: record("patch"),
    delete: record("delete"),
    get: record("get"),
    list: async () => ({ items: [], metadata: {} }),
  } as unknown as Ctx["kube"];
}

/** A context whose caches hold `objects`; every write is recorded (and answered with its body). */
export function fakeCtx(objects: {
  pools?: KObject[];
  pods?: KObject[];
  secrets?: KObject[];
  sandboxes?: KObject[];
}) {
  const writes: Write[] = [];
  const caches = {
    sandboxes: new FakeInformer(objects.sandboxes),
    pools: new FakeInformer(objects.pools),
    pods: new FakeInformer(objects.pods),
    claims: new FakeInformer(),
    secrets: new FakeInformer(objects.secrets),
    networkPolicies: new FakeInformer(),
    nodes: new FakeInformer(),
    apiServerEndpoints: new FakeInformer(),
  };
  const ctx = {
    kube: recordingKube((w) => void writes.push(w)),
    cfg: readConfig({}),
    log: pino({ level: "silent" }),
    events: { record: () => undefined } as unknown as Ctx["events"],
    caches: caches as unknown as Ctx["caches"],
    podExpectations: new Expectations(),
    writeExpectations: new Expectations(),
    progressShown: new Expectations(),
    clusterAddresses: () => [],
    policyProbe: () => undefined,
    enqueueSandbox: () => undefined,
    enqueuePool: () => undefined,
  } as unknown as Ctx;
  return { ctx, writes, caches };
}
