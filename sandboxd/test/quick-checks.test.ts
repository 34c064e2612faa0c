/**
 * The hand-written checks of a warm claim's first bodies never accept what the zod schema would
 * not, and give the schema's value; they do accept the bodies a claim sends.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type * as z from "zod";
import { quickExecuteCode, quickInit, quickRunCommand } from "../src/quick-checks.ts";
import { executeCode, init, runCommand } from "../src/request-schemas.ts";

/** Values near each field's rules, and wrong types. */
const anyValue = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.constantFrom("", "x".repeat(31), "x".repeat(32), "x".repeat(512), "x".repeat(513), "a\0b"),
  fc.constantFrom(
    "python",
    "typescript",
    "ruby",
    "numpy==2",
    "-e",
    "a b",
    "x".repeat(320),
    "x".repeat(321),
  ),
  fc.integer({ min: -2, max: 3 }),
  fc.constantFrom(0.5, 24 * 60 * 60_000, 24 * 60 * 60_000 + 1, Number.MAX_SAFE_INTEGER + 1, NaN),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.constantFrom("numpy", "zod@4", "", "-x", "a b", 1), { maxLength: 3 }),
  fc.constant(Array.from({ length: 201 }, () => "p")),
  fc.dictionary(
    fc.constantFrom("A", "_b", "PATH", "1X", "a-b", "__proto__", ""),
    fc.oneof(fc.string({ maxLength: 5 }), fc.constant("a\0"), fc.integer()),
    { maxKeys: 3 },
  ),
);

/** Each field present or not, mostly near its rules; now and then a key no schema has. */
const bodies = (fields: Record<string, fc.Arbitrary<unknown>>) =>
  fc.oneof(
    { weight: 8, arbitrary: fc.record(fields, { requiredKeys: [] }) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.record(fields, { requiredKeys: [] }), anyValue)
        .map(([b, extra]) => ({ ...b, extra })),
    },
    { weight: 1, arbitrary: anyValue },
  );

const sized = (lengths: number[]) => fc.constantFrom(...lengths).map((n) => "x".repeat(n));
const env = fc.oneof(
  fc.dictionary(fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,5}$/), fc.string({ maxLength: 5 }), {
    maxKeys: 3,
  }),
  anyValue,
);
const spec = fc.oneof(fc.constantFrom("numpy", "numpy==2.1.0", "zod@4"), sized([319, 320, 321]));
const packages = fc.oneof(
  fc.array(spec, { maxLength: 3 }),
  fc.constantFrom(199, 200, 201).map((n) => Array.from({ length: n }, () => "p")),
  anyValue,
);
const language = fc.oneof(fc.constantFrom("python", "typescript"), anyValue);
const text = fc.oneof(fc.string({ maxLength: 4 }), anyValue);
const timeoutMs = fc.oneof(
  fc.constantFrom(-1, 0, 1, 0.5, 30_000, 24 * 60 * 60_000, 24 * 60 * 60_000 + 1),
  anyValue,
);

interface Case {
  name: string;
  quick: (body: unknown) => unknown;
  schema: z.ZodType;
  fields: Record<string, fc.Arbitrary<unknown>>;
  typical: unknown[];
}

const cases: Case[] = [
  {
    name: "init",
    quick: quickInit,
    schema: init(),
    fields: { token: sized([0, 31, 32, 33, 511, 512, 513]), env, packages, language },
    typical: [
      { token: "t".repeat(48) },
      {
        token: "t".repeat(48),
        env: { A: "1", B_2: "x y" },
        packages: ["numpy==2.1.0", "zod@4"],
        language: "typescript",
      },
    ],
  },
  {
    name: "runCommand",
    quick: quickRunCommand,
    schema: runCommand(),
    fields: { command: text, cwd: text, env, timeoutMs, stdin: text },
    typical: [
      { command: "true" },
      {
        command: "echo $A",
        cwd: "/mnt/user-data/workspace",
        env: { A: "1" },
        timeoutMs: 30_000,
        stdin: "in",
      },
    ],
  },
  {
    name: "executeCode",
    quick: quickExecuteCode,
    schema: executeCode(),
    fields: {
      language,
      code: fc.oneof(text, sized([0, 1])),
      cwd: text,
      env,
      timeoutMs,
    },
    typical: [
      { language: "python", code: "print(1)" },
      { language: "python", code: "" },
      {
        language: "typescript",
        code: "console.log(process.env.A)",
        cwd: "/mnt/user-data/workspace",
        env: { A: "1" },
        timeoutMs: 30_000,
      },
    ],
  },
];

describe.each(cases)("$name", ({ quick, schema, fields, typical }) => {
  it("accepts only what the schema accepts, with the schema's value", () => {
    fc.assert(
      fc.property(bodies(fields), (body) => {
        // JSON bodies only: what readJson can hand over.
        const json: unknown = JSON.parse(JSON.stringify(body) ?? "null");
        const got = quick(json ?? {});
        if (got === undefined) return;
        const r = schema.safeParse(json ?? {});
        expect(r.success).toBe(true);
        expect(got).toStrictEqual(r.data);
      }),
      { numRuns: 5000 },
    );
  });

  it("accepts the bodies a claim sends", () => {
    for (const body of typical) {
      expect(quick(body)).toStrictEqual(schema.parse(body));
    }
  });
});
