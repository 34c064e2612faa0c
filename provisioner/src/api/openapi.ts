/**
 * /openapi.json: every route the service answers, its request and response bodies
 * generated from the zod schemas beside it (./schemas.ts), so the document cannot drift from
 * the validation. A route's schema and its entry here are added together.
 */
import { z } from "zod";
import { Port } from "@sandpit/sandboxd/protocol";
import {
  CreateSandbox,
  DeerFlowCreate,
  DeerFlowSandbox,
  ErrorBody,
  SandboxList,
  SandboxView,
  SetTimeout,
} from "./schemas.ts";

export function openApi() {
  const schema = (s: z.ZodType) => z.toJSONSchema(s, { io: "input", unrepresentable: "any" });
  const ok = (s: z.ZodType, description: string) => ({
    description,
    content: { "application/json": { schema: schema(s) } },
  });
  const err = {
    description: "error",
    content: { "application/json": { schema: schema(ErrorBody) } },
  };
  const id = [{ name: "id", in: "path", required: true, schema: { type: "string" } }];
  return {
    openapi: "3.1.0",
    info: { title: "Sandpit provisioner", version: "0.1.0" },
    components: {
      securitySchemes: {
        bearer: { type: "http", scheme: "bearer" },
        apiKey: { type: "apiKey", in: "header", name: "X-API-Key" },
      },
    },
    security: [{ bearer: [] }],
    paths: {
      "/v1/sandboxes": {
        post: {
          summary:
            "Create a sandbox (idempotent per user and thread); waits for Ready unless wait is false",
          requestBody: { content: { "application/json": { schema: schema(CreateSandbox) } } },
          responses: {
            200: ok(SandboxView, "the existing sandbox"),
            201: ok(SandboxView, "created"),
            400: err,
            401: err,
            429: err,
            504: err,
          },
        },
        get: {
          summary: "List sandboxes, filtered by label=key=value",
          responses: { 200: ok(SandboxList, "sandboxes"), 401: err },
        },
      },
      "/v1/sandboxes/{id}": {
        get: { parameters: id, responses: { 200: ok(SandboxView, "the sandbox"), 404: err } },
        delete: { parameters: id, responses: { 204: { description: "deleted" }, 404: err } },
      },
      "/v1/sandboxes/{id}/pause": {
        post: { parameters: id, responses: { 202: ok(SandboxView, "suspending"), 404: err } },
      },
      "/v1/sandboxes/{id}/resume": {
        post: {
          parameters: id,
          responses: { 200: ok(SandboxView, "Ready again"), 404: err, 429: err },
        },
      },
      "/v1/sandboxes/{id}/timeout": {
        post: {
          parameters: id,
          requestBody: { content: { "application/json": { schema: schema(SetTimeout) } } },
          responses: { 200: ok(SandboxView, "the new expiresAt"), 400: err, 404: err },
        },
      },
      "/v1/sandboxes/{id}/keepalive": {
        post: {
          parameters: id,
          responses: { 204: { description: "activity recorded" }, 404: err },
        },
      },
      "/v1/sandboxes/{id}/proxy/{path}": {
        summary:
          "Any method: forwarded to sandboxd (bodies streamed; upgrades spliced); resumes a suspended sandbox first",
        parameters: [
          ...id,
          { name: "path", in: "path", required: true, schema: { type: "string" } },
        ],
      },
      "/v1/sandboxes/{id}/ports/{port}/{path}": {
        summary:
          "Any method: forwarded to a server listening on {port} inside the sandbox, through sandboxd's tunnel (bodies streamed; WebSocket upgrades spliced); 502 when nothing listens there",
        parameters: [
          ...id,
          {
            name: "port",
            in: "path",
            required: true,
            schema: schema(Port),
          },
          { name: "path", in: "path", required: true, schema: { type: "string" } },
        ],
      },
      "/api/sandboxes": {
        post: {
          security: [{ apiKey: [] }],
          requestBody: { content: { "application/json": { schema: schema(DeerFlowCreate) } } },
          responses: {
            200: ok(DeerFlowSandbox, "DeerFlow-compatible sandbox"),
            400: err,
            401: err,
          },
        },
        get: {
          security: [{ apiKey: [] }],
          responses: { 200: { description: "{sandboxes, count}" } },
        },
      },
      "/api/sandboxes/{id}": {
        get: {
          security: [{ apiKey: [] }],
          parameters: id,
          responses: { 200: ok(DeerFlowSandbox, "the sandbox"), 404: err },
        },
        delete: {
          security: [{ apiKey: [] }],
          parameters: id,
          responses: { 200: { description: "{ok, sandbox_id}" }, 404: err },
        },
      },
      "/health": { get: { security: [], responses: { 200: { description: '{"status":"ok"}' } } } },
      "/healthz": { get: { security: [], responses: { 200: { description: "alive" } } } },
      "/readyz": {
        get: {
          security: [],
          responses: { 200: { description: "cache synced" }, 503: { description: "not yet" } },
        },
      },
      "/metrics": {
        get: { security: [], responses: { 200: { description: "Prometheus metrics" } } },
      },
    },
  };
}
