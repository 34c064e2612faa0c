/**
 * The one place Sandpit talks HTTP to the Kubernetes API. client-node supplies the
 * kubeconfig handling (files, in-cluster service account, exec plugins) and the TLS dispatcher;
 * requests and responses stay plain JSON so objects from lists, watches and writes all look the
 * same (the generated typed clients turn timestamps into Date objects, watches do not).
 */
import { type HttpMethod, KubeConfig, RequestContext } from "@kubernetes/client-node";
import { fetch } from "undici";
import { deadline } from "./deadline.ts";

export interface ObjectMeta {
  name: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
}
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}
/** Any Kubernetes object, as JSON. */
export interface KObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}
export interface KList<T extends KObject = KObject> {
  apiVersion?: string;
  kind?: string;
  metadata: { resourceVersion?: string; continue?: string };
  items: T[];
}

/** An error status from the API server, with the fields callers branch on. */
export class KubeApiError extends Error {
  readonly status: number;
  readonly reason: string | undefined;
  constructor(status: number, reason: string | undefined, message: string) {
    super(message);
    this.name = "KubeApiError";
    this.status = status;
    this.reason = reason;
  }
}
export const isNotFound = (err: unknown) => err instanceof KubeApiError && err.status === 404;
export const isConflict = (err: unknown) => err instanceof KubeApiError && err.status === 409;
export const isAlreadyExists = (err: unknown) =>
  err instanceof KubeApiError && err.status === 409 && err.reason === "AlreadyExists";

export type PatchType = "apply" | "merge" | "json";
const PATCH_CONTENT_TYPE: Record<PatchType, string> = {
  apply: "application/apply-patch+yaml",
  merge: "application/merge-patch+json",
  json: "application/json-patch+json",
};

/** Where a kind lives in the API: enough to build every URL a client needs. */
export interface Resource {
  group: string; // "" for the core group
  version: string;
  plural: string;
  kind: string;
}
export const apiVersionOf = (r: Resource) => (r.group ? `${r.group}/${r.version}` : r.version);

export function resourcePath(r: Resource, namespace?: string, name?: string, sub?: string): string {
  let p = r.group ? `/apis/${r.group}/${r.version}` : `/api/${r.version}`;
  if (namespace) p += `/namespaces/${encodeURIComponent(namespace)}`;
  p += `/${r.plural}`;
  if (name) p += `/${encodeURIComponent(name)}`;
  if (sub) p += `/${sub}`;
  return p;
}

/** "pods", "sandboxes/status", ... from an API path. */
export function resourceOfPath(path: string): string {
  const parts = path.split("?")[0]!.split("/").filter(Boolean);
  const at = parts.indexOf("namespaces");
  const rest = at >= 0 ? parts.slice(at + 2) : parts.slice(parts[0] === "api" ? 2 : 3);
  return rest.length >= 3 ? `${rest[0]}/${rest[2]}` : (rest[0] ?? "unknown");
}

export function loadKubeConfig(file?: string): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else kc.loadFromDefault(); // KUBECONFIG, ~/.kube/config, then the in-cluster service account
  if (!kc.getCurrentCluster()) throw new Error("the kubeconfig has no current cluster");
  return kc;
}

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  contentType?: string;
  signal?: AbortSignal;
  timeoutMs?: number;
}

export interface KubeOptions {
  /** Who this client writes as: the field manager of its creates, applies and patches. */
  fieldManager: string;
  /** Sees every request's outcome (for the caller's metrics and debug logs). */
  onResponse?: (method: string, path: string, status: number, ms: number) => void;
}

export class Kube {
  readonly config: KubeConfig;
  readonly server: string;
  readonly fieldManager: string;
  readonly #onResponse: KubeOptions["onResponse"];
  /**
   * The connection pool to the API server, kept for the client's life. client-node builds a
   * new dispatcher each time it applies the kubeconfig to a request: used as given, every
   * request would open (and leave open until it times out) a TLS connection of its own, which
   * under load was 150 connections, a TLS handshake per write and the larger part of the
   * operator's memory. The kubeconfig is still applied to each request for its headers (a
   * token that rotates).
   */
  #dispatcher: ReturnType<RequestContext["getDispatcher"]>;

  constructor(config: KubeConfig, opts: KubeOptions) {
    this.config = config;
    this.server = config.getCurrentCluster()!.server.replace(/\/$/, "");
    this.fieldManager = opts.fieldManager;
    this.#onResponse = opts.onResponse;
  }

  async request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const url = new URL(this.server + path);
    for (const [k, v] of Object.entries(opts.query ?? {})) {
      if (v !== undefined) url.searchParams.set(k, String(v));
    }
    const ctx = new RequestContext(url.toString(), method as HttpMethod);
    await this.config.applySecurityAuthentication(ctx);
    const headers: Record<string, string> = { ...ctx.getHeaders(), accept: "application/json" };
    if (opts.body !== undefined) headers["content-type"] = opts.contentType ?? "application/json";
    const bound = deadline(opts.timeoutMs ?? 30_000, opts.signal);
    const started = performance.now();
    let res: Response;
    let text: string;
    try {
      res = await fetch(url, {
        method,
        headers,
        body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
        dispatcher: (this.#dispatcher ??= ctx.getDispatcher()),
        signal: bound.signal,
      });
      text = await res.text();
    } finally {
      bound.clear();
    }
    this.#onResponse?.(method, path, res.status, performance.now() - started);
    if (!res.ok) {
      let reason: string | undefined;
      let message = `${method} ${path}: HTTP ${res.status}`;
      try {
        const status = JSON.parse(text) as { reason?: string; message?: string };
        reason = status.reason;
        if (status.message) message = `${method} ${path}: ${status.message}`;
      } catch {
        if (text) message += `: ${text.slice(0, 300)}`;
      }
      throw new KubeApiError(res.status, reason, message);
    }
    return (text ? JSON.parse(text) : undefined) as T;
  }

  get<T extends KObject>(r: Resource, namespace: string | undefined, name: string): Promise<T> {
    return this.request<T>("GET", resourcePath(r, namespace, name));
  }

  list<T extends KObject>(
    r: Resource,
    namespace?: string,
    query: {
      labelSelector?: string;
      fieldSelector?: string;
      limit?: number;
      continue?: string;
    } = {},
  ): Promise<KList<T>> {
    return this.request<KList<T>>("GET", resourcePath(r, namespace), { query });
  }

  create<T extends KObject>(r: Resource, obj: T): Promise<T> {
    return this.request<T>("POST", resourcePath(r, obj.metadata.namespace), {
      body: { apiVersion: apiVersionOf(r), kind: r.kind, ...obj },
      query: { fieldManager: this.fieldManager },
    });
  }

  /** Server-side apply under this client's field manager, taking over conflicting fields. */
  apply<T extends KObject>(r: Resource, obj: T, sub?: string): Promise<T> {
    return this.request<T>(
      "PATCH",
      resourcePath(r, obj.metadata.namespace, obj.metadata.name, sub),
      {
        body: { apiVersion: apiVersionOf(r), kind: r.kind, ...obj },
        contentType: PATCH_CONTENT_TYPE.apply,
        query: { fieldManager: this.fieldManager, force: true },
      },
    );
  }

  patch<T extends KObject>(
    r: Resource,
    namespace: string | undefined,
    name: string,
    type: PatchType,
    body: unknown,
    sub?: string,
  ): Promise<T> {
    return this.request<T>("PATCH", resourcePath(r, namespace, name, sub), {
      body,
      contentType: PATCH_CONTENT_TYPE[type],
      query: { fieldManager: this.fieldManager },
    });
  }

  /** Deletes; a 404 counts as done. `uid` makes it a precondition (never delete a newer namesake). */
  async delete(
    r: Resource,
    namespace: string | undefined,
    name: string,
    opts: {
      uid?: string;
      propagationPolicy?: "Background" | "Foreground";
      gracePeriodSeconds?: number;
    } = {},
  ): Promise<void> {
    try {
      await this.request("DELETE", resourcePath(r, namespace, name), {
        body: {
          apiVersion: "v1",
          kind: "DeleteOptions",
          ...(opts.uid ? { preconditions: { uid: opts.uid } } : {}),
          propagationPolicy: opts.propagationPolicy ?? "Background",
          ...(opts.gracePeriodSeconds !== undefined
            ? { gracePeriodSeconds: opts.gracePeriodSeconds }
            : {}),
        },
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
}
