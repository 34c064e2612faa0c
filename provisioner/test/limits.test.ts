/**
 * Limits are policy (provisioner/src/limits.ts, operator/src/api/bounds.ts): the bounds each
 * create is held to, the 400 naming the bound, the 404 for an unknown pool, the settings, and
 * serve's store refusing before it makes anything.
 */
import { pino } from "pino";
import type { SandboxProvider } from "@sandpit/sdk";
import { describe, expect, test } from "vitest";
import {
  PLATFORM_BOUNDS,
  type SandboxPool,
  boundsProblem,
  platformBoundsFrom,
  resolveBounds,
} from "@sandpit/operator/api";
import { type ApiError, toApiError } from "../src/api/errors.ts";
import { CreateSandbox } from "../src/api/schemas.ts";
import { readConfig } from "../src/config.ts";
import { CreateRefused, admitResources, existingPool } from "../src/limits.ts";
import { ProviderStore } from "../src/serve/provider-store.ts";
import type { CreateInput } from "../src/store.ts";

const KEYS = JSON.stringify([{ key: "k".repeat(24), tenant: "acme" }]);

const pool = (spec: Partial<SandboxPool["spec"]>): SandboxPool => ({
  metadata: { name: "p" },
  spec: { maxActive: 1, warm: 0, evictionPolicy: "LRU", template: {}, ...spec },
});

const input = (over: Partial<CreateInput>): CreateInput => ({
  tenant: "acme",
  spec: {},
  ...over,
});

/** The error `fn` throws (it must throw), as the API answers it. */
function thrown(fn: () => unknown): ApiError {
  try {
    fn();
  } catch (err) {
    if (err instanceof CreateRefused) return toApiError(err);
    throw err;
  }
  throw new Error("did not throw");
}

describe("bounds", () => {
  test("the attack of issue 18 row 1: a node's worth is refused, naming the platform's bound", () => {
    const err = thrown(() =>
      admitResources(
        input({ spec: { resources: { memory: "100Gi", cpu: "64", ephemeralStorage: "10Ti" } } }),
        undefined,
        PLATFORM_BOUNDS,
      ),
    );
    expect(err.code).toBe("INVALID_ARGUMENT");
    expect(err.status).toBe(400);
    expect(err.message).toBe(
      "resources: cpu 64 is above the platform's maximum 4; memory 100Gi is above the platform's maximum 4Gi; ephemeralStorage 10Ti is above the platform's maximum 8Gi",
    );
  });

  test("zero is refused by the API's schema and by the bounds check alike", () => {
    for (const q of ["0", "0.0", "0m", "0Gi", "000Mi"]) {
      const parsed = CreateSandbox.safeParse({ resources: { memory: q } });
      expect(parsed.success, q).toBe(false);
      expect(parsed.error?.issues[0]?.message).toMatch(/above zero/);
      expect(boundsProblem({ memory: q }, resolveBounds(undefined, PLATFORM_BOUNDS))).toMatch(
        /memory .* is not above zero/,
      );
    }
    expect(CreateSandbox.safeParse({ resources: { cpu: "0.5", memory: "10Mi" } }).success).toBe(
      true,
    );
  });

  test("a pool's bounds replace the platform's; the key's ceiling only lowers", () => {
    const p = pool({ resourceBounds: { min: { memory: "256Mi" }, max: { memory: "2Gi" } } });
    expect(
      thrown(() =>
        admitResources(input({ spec: { resources: { memory: "3Gi" } } }), p, PLATFORM_BOUNDS),
      ).message,
    ).toBe("resources: memory 3Gi is above this pool's maximum 2Gi");
    expect(
      thrown(() =>
        admitResources(input({ spec: { resources: { memory: "128Mi" } } }), p, PLATFORM_BOUNDS),
      ).message,
    ).toBe("resources: memory 128Mi is below this pool's minimum 256Mi");
    // The pool may allow more than the platform's default ceiling (an administrator set it).
    const big = pool({ resourceBounds: { max: { cpu: "8" } } });
    admitResources(input({ spec: { resources: { cpu: "8" } } }), big, PLATFORM_BOUNDS);
    // The key's lower ceiling wins; a higher one changes nothing.
    expect(
      thrown(() =>
        admitResources(
          input({ spec: { resources: { memory: "1Gi" } }, maxResources: { memory: "512Mi" } }),
          p,
          PLATFORM_BOUNDS,
        ),
      ).message,
    ).toBe("resources: memory 1Gi is above this API key's maximum 512Mi");
    expect(
      thrown(() =>
        admitResources(
          input({ spec: { resources: { memory: "3Gi" } }, maxResources: { memory: "64Gi" } }),
          p,
          PLATFORM_BOUNDS,
        ),
      ).message,
    ).toMatch(/above this pool's maximum 2Gi/);
  });

  test("what the pool's template gives counts when the create asks for nothing", () => {
    const p = pool({ template: { resources: { memory: "1Gi" }, storage: { size: "10Gi" } } });
    expect(
      thrown(() => admitResources(input({ maxResources: { memory: "512Mi" } }), p, PLATFORM_BOUNDS))
        .message,
    ).toBe(
      "resources: memory 1Gi is above this API key's maximum 512Mi; disk (storage.size) 10Gi is above the platform's maximum 4Gi",
    );
  });

  test("an unknown pool is a 404; a known one is handed back", async () => {
    const err = await existingPool("nope", () => Promise.resolve(undefined)).catch(toApiError);
    expect(err?.status).toBe(404);
    expect(err?.code).toBe("NOT_FOUND");
    expect(err?.message).toBe('no SandboxPool "nope"');
    const p = pool({});
    expect(await existingPool("p", () => Promise.resolve(p))).toBe(p);
    expect(await existingPool(undefined, () => Promise.reject(new Error("not asked")))).toBe(
      undefined,
    );
  });
});

describe("settings", () => {
  test("the platform's bounds default, and SANDPIT_MIN_* / SANDPIT_MAX_* set them", () => {
    expect(readConfig({ SANDPIT_API_KEYS: KEYS }).bounds).toEqual(PLATFORM_BOUNDS);
    const cfg = readConfig({
      SANDPIT_API_KEYS: KEYS,
      SANDPIT_MAX_MEMORY: "2Gi",
      SANDPIT_MIN_CPU: "100m",
    });
    expect(cfg.bounds.max.memory).toBe("2Gi");
    expect(cfg.bounds.min.cpu).toBe("100m");
  });

  test.each([
    [{ SANDPIT_MAX_MEMORY: "0" }, /SANDPIT_MAX_MEMORY: must be a Kubernetes quantity/],
    [{ SANDPIT_MAX_CPU: "lots" }, /SANDPIT_MAX_CPU: must be a Kubernetes quantity/],
    [{ SANDPIT_MIN_DISK: "8Gi" }, /SANDPIT_MIN_DISK \(8Gi\) is above SANDPIT_MAX_DISK \(4Gi\)/],
  ])("%j is refused at start", (env, message) => {
    expect(() => readConfig({ SANDPIT_API_KEYS: KEYS, ...env })).toThrow(message);
    expect(platformBoundsFrom(env).problems.length).toBe(1);
  });

  test("an API key's maxResources are positive quantities", () => {
    const keys = (maxResources: unknown) =>
      JSON.stringify([{ key: "k".repeat(24), tenant: "acme", maxResources }]);
    expect(readConfig({ SANDPIT_API_KEYS: keys({ memory: "1Gi" }) }).keys[0]?.maxResources).toEqual(
      {
        memory: "1Gi",
      },
    );
    expect(() => readConfig({ SANDPIT_API_KEYS: keys({ memory: "0" }) })).toThrow(/above zero/);
    expect(() => readConfig({ SANDPIT_API_KEYS: keys({ gpus: "1" }) })).toThrow(/gpus/);
  });
});

describe("sandpit serve's store", () => {
  test("applies the same bounds before it makes anything", async () => {
    const store = new ProviderStore({
      // Never reached: the refusal comes first.
      provider: {} as never,
      serveId: "s",
      log: pino({ level: "silent" }),
      support: { backend: "docker", cpu: true, memory: true, disk: true, networkDeny: true },
      idleTimeoutMs: 0,
      bounds: { ...PLATFORM_BOUNDS, max: { ...PLATFORM_BOUNDS.max, memory: "1Gi" } },
    });
    const err = await store
      .create(input({ spec: { resources: { memory: "2Gi" } } }))
      .then(() => undefined, toApiError);
    expect(err?.status).toBe(400);
    expect(err?.message).toBe("resources: memory 2Gi is above the platform's maximum 1Gi");
    expect(store.count("acme")).toBe(0);
  });
});

describe("sandpit serve's quota", () => {
  /** A provider whose creates wait until `settle` is called, then all fail. */
  const slowProvider = () => {
    let settle!: () => void;
    const gate = new Promise<void>((resolve) => (settle = resolve));
    let started = 0;
    const provider = {
      create: async () => {
        started++;
        await gate;
        throw new Error("the backend could not start it");
      },
    } as unknown as SandboxProvider;
    return { provider, settle, started: () => started };
  };

  test("counts a create from its start: concurrent creates cannot pass it", async () => {
    const slow = slowProvider();
    const store = new ProviderStore({
      provider: slow.provider,
      serveId: "s",
      log: pino({ level: "silent" }),
      support: { backend: "docker", cpu: true, memory: true, disk: true, networkDeny: true },
      idleTimeoutMs: 0,
      bounds: PLATFORM_BOUNDS,
    });
    // Twenty at once under a quota of three, none of them made yet when the others arrive.
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, () => store.create(input({ quota: 3 }))),
    );
    const made = results.filter((r) => r.status === "fulfilled");
    const refused = results.flatMap((r) => (r.status === "rejected" ? [toApiError(r.reason)] : []));
    expect(made).toHaveLength(3);
    expect(refused).toHaveLength(17);
    for (const err of refused) expect(err.status).toBe(429);
    expect(slow.started()).toBe(3); // the backend was asked for three, no more
    expect(store.count("acme")).toBe(3);

    // A create that fails leaves a Failed sandbox, which holds its place until it is deleted
    // (as a Failed Sandbox does on Kubernetes); deleting it gives the place back.
    slow.settle();
    const names = made.map((r) => r.value.sandbox.metadata.name);
    for (const name of names) {
      await expect(store.waitReady(name, 10_000)).rejects.toThrow(/could not start/);
    }
    await expect(store.create(input({ quota: 3 }))).rejects.toMatchObject({ kind: "quota" });
    await store.delete(names[0]!);
    expect(store.count("acme")).toBe(2);
    const again = await Promise.allSettled([
      store.create(input({ quota: 3 })),
      store.create(input({ quota: 3 })),
    ]);
    expect(again.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"]);
    store.stop();
  });
});
