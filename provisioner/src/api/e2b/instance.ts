/**
 * The SDK's SandboxInstance for a Kubernetes Sandbox, as the E2B data plane (./envd/) needs it:
 * the shared sandboxd-backed instance over a lifecycle whose connect() is the Transport's Ready
 * sandbox and a SandboxdClient at its endpoint with its own token. Every connect counts as
 * activity. The token never leaves the provisioner.
 *
 * One instance (and one keep-alive connection pool) per Sandbox uid, kept while used; a sandbox
 * made again under the same name is a new uid, so nothing of the old one is reused.
 */
// The SDK's modules themselves, not its entry point: that one registers every provider, and a
// bundle of the provisioner would take in their SDKs (Docker's native add-ons included).
import type { SandboxInfo, SandboxInstance } from "@sandpit/sdk";
import { SandboxError } from "@sandpit/sdk/errors";
import { SandboxdClient } from "@sandpit/sdk/sandboxd-client";
import { SandboxdInstance, type SandboxdLifecycle } from "@sandpit/sdk/sandboxd-instance";
import type { Sandbox } from "../../sandboxes.ts";
import type { SandboxBackend } from "../../store.ts";
import { MAX_LIFETIME_S, lifetimePatch, livedSeconds } from "../../lifetime.ts";
import { type Transport, splitEndpoint } from "../../transport.ts";
import { autoResumes, endAt, metadataOf, startedAt, stateOf, templateOf } from "./records.ts";

/** An instance unused this long is dropped with its connections. */
const IDLE_MS = 5 * 60_000;

export interface InstanceDeps {
  store: SandboxBackend;
  transport: Transport;
  /** The public host of a port of a sandbox (`<port>-<id>.<domain>`), when a domain is set. */
  hostOf: ((sandboxId: string, port: number) => string) | undefined;
}

interface Entry {
  instance: SandboxInstance;
  lifecycle: KubeSandbox;
  usedAt: number;
}

export class SandboxInstances {
  readonly #d: InstanceDeps;
  readonly #byUid = new Map<string, Entry>();

  constructor(d: InstanceDeps) {
    this.#d = d;
  }

  /** The instance of this sandbox (the same one for the same uid while it is in use). */
  for(s: Sandbox): SandboxInstance {
    const now = Date.now();
    for (const [uid, e] of this.#byUid)
      if (now - e.usedAt > IDLE_MS) {
        this.#byUid.delete(uid);
        void e.lifecycle.close();
      }
    const uid = s.metadata.uid!;
    let e = this.#byUid.get(uid);
    if (!e) {
      const lifecycle = new KubeSandbox(this.#d, s.metadata.name, uid);
      e = { instance: new SandboxdInstance(s.metadata.name, lifecycle), lifecycle, usedAt: now };
      this.#byUid.set(uid, e);
    }
    e.usedAt = now;
    return e.instance;
  }
}

/** One Sandbox's lifecycle, looked up afresh on every connect: it may have moved or gone. */
class KubeSandbox implements SandboxdLifecycle {
  readonly #d: InstanceDeps;
  readonly #name: string;
  readonly #uid: string;
  #client: { endpoint: string; token: string; client: SandboxdClient } | undefined;

  constructor(d: InstanceDeps, name: string, uid: string) {
    this.#d = d;
    this.#name = name;
    this.#uid = uid;
  }

  /** The sandbox this instance was made for, or NOT_FOUND once it is deleted (or replaced). */
  #current(): Sandbox {
    const s = this.#d.store.getAnyTenant(this.#name);
    if (!s || s.metadata.uid !== this.#uid || s.metadata.deletionTimestamp)
      throw new SandboxError(`sandbox ${this.#name} no longer exists`, "NOT_FOUND");
    return s;
  }

  async connect(): Promise<SandboxdClient> {
    const s = this.#current();
    // As on E2B: traffic wakes a paused sandbox only if it was created with autoResume.
    if (stateOf(s) === "paused" && !autoResumes(s))
      throw new SandboxError(
        `sandbox ${this.#name} is paused: connect to it (Sandbox.connect) to resume it`,
        "CONNECTION_FAILED",
      );
    const ready = await this.#d.transport.ready(s);
    void this.#d.store.reportActivity(this.#name);
    const endpoint = ready.status!.endpoint!;
    // Both stores answer from memory (the Kubernetes one caches the token per uid).
    const token = await this.#d.store.token(ready);
    if (this.#client?.endpoint !== endpoint || this.#client.token !== token) {
      // A resumed sandbox runs in a new pod at a new address; on serve's local backend, a new
      // sandboxd on the same socket with a new token.
      void this.#client?.client.close();
      // A pod's address, or (serve's local backend) sandboxd's unix socket.
      const { socketPath } = splitEndpoint(endpoint);
      this.#client = {
        endpoint,
        token,
        client: new SandboxdClient(
          socketPath
            ? { baseUrl: "http://sandboxd", socketPath, token }
            : { baseUrl: `http://${endpoint}`, token },
        ),
      };
    }
    return this.#client.client;
  }

  async pause(): Promise<void> {
    await this.#d.store.setSuspended(this.#current().metadata.name, true);
  }

  async kill(): Promise<void> {
    await this.#d.store.delete(this.#current().metadata.name);
    await this.close();
  }

  async setTimeout(timeoutMs: number): Promise<void> {
    const s = this.#current();
    const ttl = livedSeconds(s) + Math.ceil(timeoutMs / 1000);
    if (ttl > MAX_LIFETIME_S)
      throw new SandboxError(`a sandbox lives at most ${MAX_LIFETIME_S}s`, "INVALID_ARGUMENT");
    await this.#d.store.setLifecycle(this.#name, lifetimePatch(s, ttl));
  }

  async info(): Promise<SandboxInfo> {
    const s = this.#current();
    return {
      sandboxId: this.#name,
      provider: "kubernetes",
      state: stateOf(s),
      labels: metadataOf(s),
      template: templateOf(s),
      createdAt: startedAt(s),
      expiresAt: endAt(s),
    };
  }

  async getHost(port: number): Promise<string> {
    if (!this.#d.hostOf)
      throw new SandboxError(
        "a port's public host needs the E2B domain (SANDPIT_E2B_DOMAIN) to be set",
        "NOT_SUPPORTED",
      );
    return this.#d.hostOf(this.#name, port);
  }

  async diagnose(err: SandboxError): Promise<SandboxError> {
    try {
      this.#current();
      return err;
    } catch (gone) {
      return gone as SandboxError;
    }
  }

  async close(): Promise<void> {
    const c = this.#client;
    this.#client = undefined;
    await c?.client.close();
  }
}
