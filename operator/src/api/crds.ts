/**
 * CustomResourceDefinitions generated from the zod types in v1alpha1.ts: JSON Schema
 * (OpenAPI 3.0) from zod, then made structural the way the API server requires (no
 * `additionalProperties: false` beside `properties`, no unbounded-integer noise).
 */
import { z } from "zod";
import {
  GROUP,
  SandboxPoolSpec,
  SandboxPoolStatus,
  SandboxSpec,
  SandboxStatus,
  VERSION,
} from "./v1alpha1.ts";

type Schema = Record<string, unknown>;

/** Rewrites zod's JSON Schema into a Kubernetes structural schema. */
function structural(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(structural);
  if (!node || typeof node !== "object") return node;
  const out: Schema = {};
  for (const [key, value] of Object.entries(node as Schema)) {
    if (key === "$schema") continue;
    if (key === "additionalProperties" && value === false) continue; // pruning does this job
    if (key === "maximum" && value === Number.MAX_SAFE_INTEGER) continue;
    if (key === "minimum" && value === Number.MIN_SAFE_INTEGER) continue;
    out[key] = structural(value);
  }
  return out;
}

function schemaOf(type: z.ZodType): Schema {
  return structural(z.toJSONSchema(type, { target: "openapi-3.0", io: "input" })) as Schema;
}

interface Column {
  name: string;
  type: string;
  jsonPath: string;
  description: string;
  /** 1: shown by `kubectl get -o wide` only. */
  priority?: number;
}

function crd(o: {
  kind: string;
  plural: string;
  shortNames: string[];
  description: string;
  spec: z.ZodType;
  status: z.ZodType;
  columns: Column[];
}): Schema {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${o.plural}.${GROUP}`, labels: { "app.kubernetes.io/part-of": "sandpit" } },
    spec: {
      group: GROUP,
      scope: "Namespaced",
      names: {
        kind: o.kind,
        listKind: `${o.kind}List`,
        plural: o.plural,
        singular: o.kind.toLowerCase(),
        shortNames: o.shortNames,
      },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: o.columns,
          schema: {
            openAPIV3Schema: {
              type: "object",
              description: o.description,
              required: ["spec"],
              properties: {
                apiVersion: {
                  type: "string",
                  description: "APIVersion of this object: sandpit.dev/v1alpha1.",
                },
                kind: { type: "string", description: `Kind of this object: ${o.kind}.` },
                metadata: { type: "object" },
                spec: schemaOf(o.spec),
                status: schemaOf(o.status),
              },
            },
          },
        },
      ],
    },
  };
}

const age: Column = {
  name: "Age",
  type: "date",
  jsonPath: ".metadata.creationTimestamp",
  description: "Time since creation.",
};

export function crds(): Schema[] {
  return [
    crd({
      kind: "Sandbox",
      plural: "sandboxes",
      shortNames: ["sbx"],
      description:
        "An isolated sandbox for untrusted code: a Pod running sandboxd, with its Service, volume, network policy and token.",
      spec: SandboxSpec,
      status: SandboxStatus,
      columns: [
        {
          name: "Phase",
          type: "string",
          jsonPath: ".status.phase",
          description: "Pending, Starting, Ready, Suspended, Failed or Terminating.",
        },
        {
          name: "Pool",
          type: "string",
          jsonPath: ".spec.poolRef",
          description: "The SandboxPool it belongs to.",
        },
        {
          name: "Endpoint",
          type: "string",
          jsonPath: ".status.endpoint",
          description: "In-cluster address of sandboxd.",
        },
        age,
        {
          name: "Tenant",
          type: "string",
          jsonPath: ".metadata.labels.sandpit\\.dev/tenant",
          description: "The tenant (API key) it belongs to.",
          priority: 1,
        },
        {
          name: "Thread",
          type: "string",
          jsonPath: ".metadata.annotations.sandpit\\.dev/thread-id",
          description: "The agent thread it serves, as the client named it.",
          priority: 1,
        },
        {
          name: "Reason",
          type: "string",
          jsonPath: '.status.conditions[?(@.type=="Ready")].reason',
          description: "Why it is in its phase (the Ready condition's reason).",
          priority: 1,
        },
        {
          name: "Last-Failure",
          type: "string",
          jsonPath: ".status.lastFailure.reason",
          description: "Why its pod last died or its sandboxd was last restarted.",
          priority: 1,
        },
        {
          name: "Expires",
          type: "date",
          jsonPath: ".status.expiresAt",
          description: "When its TTL ends it.",
          priority: 1,
        },
      ],
    }),
    crd({
      kind: "SandboxPool",
      plural: "sandboxpools",
      shortNames: ["sbxpool"],
      description:
        "A pool of sandboxes sharing a template, with a cap on active sandboxes and warm capacity.",
      spec: SandboxPoolSpec,
      status: SandboxPoolStatus,
      columns: [
        {
          name: "Max",
          type: "integer",
          jsonPath: ".spec.maxActive",
          description: "The cap on Ready sandboxes.",
        },
        {
          name: "Active",
          type: "integer",
          jsonPath: ".status.active",
          description: "Ready sandboxes.",
        },
        {
          name: "Warm",
          type: "integer",
          jsonPath: ".status.warmReady",
          description: "Warm sandboxes ready to claim.",
        },
        {
          name: "Policy",
          type: "string",
          jsonPath: ".spec.evictionPolicy",
          description: "LRU or Reject.",
        },
        age,
      ],
    }),
  ];
}
