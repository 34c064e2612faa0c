/**
 * fast-check arbitraries from the JSON Schema that zod generates for a request body (the same
 * document /openapi.json serves): values the schema accepts, and values that break it in one
 * place (a field of the wrong type, a missing required field, an unknown key) or everywhere.
 */
import fc from "fast-check";
import { z } from "zod";

interface JsonSchema {
  type?: string;
  anyOf?: JsonSchema[];
  enum?: unknown[];
  const?: unknown;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  items?: JsonSchema;
  maxItems?: number;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  propertyNames?: JsonSchema;
}

/** The input side of `schema` (defaults not yet applied), as JSON Schema. */
export function jsonSchemaOf(schema: z.ZodType): JsonSchema {
  return z.toJSONSchema(schema, { io: "input", unrepresentable: "any" }) as JsonSchema;
}

/** Values `s` accepts. Sizes are kept small: the point is shape, not volume. */
function validValue(s: JsonSchema): fc.Arbitrary<unknown> {
  if (s.anyOf) return fc.oneof(...s.anyOf.map(validValue));
  if (s.enum) return fc.constantFrom(...s.enum);
  if (s.const !== undefined) return fc.constant(s.const);
  switch (s.type) {
    case "string": {
      const min = s.minLength ?? 0;
      const max = Math.min(s.maxLength ?? 40, 40);
      return s.pattern
        ? fc.stringMatching(new RegExp(s.pattern)).filter((v) => v.length >= min)
        : fc.string({ minLength: min, maxLength: Math.max(min, max) });
    }
    case "integer":
      return fc.integer({ min: s.minimum ?? -1e9, max: s.maximum ?? 1e9 });
    case "number":
      return fc.double({ min: s.minimum ?? -1e9, max: s.maximum ?? 1e9, noNaN: true });
    case "boolean":
      return fc.boolean();
    case "array":
      return fc.array(s.items ? validValue(s.items) : fc.anything(), {
        maxLength: Math.min(s.maxItems ?? 4, 4),
      });
    case "object": {
      if (s.properties) {
        const props = Object.fromEntries(
          Object.entries(s.properties).map(([k, v]) => [k, validValue(v)]),
        );
        return fc.record(props, { requiredKeys: (s.required ?? []) as never[] });
      }
      if (typeof s.additionalProperties === "object") {
        return fc.dictionary(
          (s.propertyNames ? validValue(s.propertyNames) : fc.string()) as fc.Arbitrary<string>,
          validValue(s.additionalProperties),
          { maxKeys: 3 },
        );
      }
      return fc.object({ maxDepth: 1 });
    }
    default:
      return fc.anything({ maxDepth: 2 });
  }
}

/** Anything JSON can carry, including the shapes most likely to trip a handler. */
const hostile: fc.Arbitrary<unknown> = fc.oneof(
  fc.anything({ maxDepth: 3, withNullPrototype: true, withObjectString: true }),
  fc.constantFrom(null, "", 0, -1, 1e308, -0, true, [], {}, "__proto__", "constructor"),
  fc.string({ unit: "grapheme", maxLength: 30 }),
  fc.constant("x".repeat(70_000)), // longer than any limit
);

const json = (v: unknown) => JSON.stringify(v) ?? "null";

/**
 * A JSON body for a route whose schema is `s`: valid (a third of the time), broken in one field,
 * with an unknown or prototype-polluting key, missing a required field, or not the right kind
 * of value at all.
 */
export function bodyFor(s: JsonSchema): fc.Arbitrary<string> {
  const valid = validValue(s);
  const keys = Object.keys(s.properties ?? {});
  const droppable = s.required?.length ? s.required : keys.length ? keys : ["x"];
  const asObject = valid.map(
    (v) => (v && typeof v === "object" ? v : {}) as Record<string, unknown>,
  );
  return fc.oneof(
    { weight: 3, arbitrary: valid.map(json) },
    {
      weight: 3,
      arbitrary: fc
        .tuple(asObject, fc.constantFrom(...(keys.length ? keys : ["x"])), hostile)
        .map(([o, k, v]) => json({ ...o, [k]: v })),
    },
    {
      // Written as text: an object literal cannot carry an own "__proto__" key.
      weight: 1,
      arbitrary: fc
        .tuple(asObject, fc.constantFrom("unknownKey", "__proto__", "constructor", ""), hostile)
        .map(([o, k, v]) => {
          const rest = json(o).slice(1);
          return `{${json(k)}:${json(v)}${rest === "}" ? "" : ","}${rest}`;
        }),
    },
    {
      weight: 1,
      arbitrary: fc.tuple(asObject, fc.constantFrom(...droppable)).map(([o, k]) => {
        const copy = { ...o };
        delete copy[k];
        return json(copy);
      }),
    },
    { weight: 2, arbitrary: hostile.map(json) },
  );
}
