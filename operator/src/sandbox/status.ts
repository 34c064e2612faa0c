/**
 * A Sandbox's status, built up during a reconcile from what it was, and written with one
 * server-side apply only when it changed. lastActivityTime is not ours: the provisioner reports
 * it with a merge patch under its own field manager (sandpit-provisioner), so it is never part of
 * what the operator applies and an apply never takes it away.
 */
import { SANDBOXES, type Sandbox, type SandboxStatus } from "../api/v1alpha1.ts";
import type { Ctx } from "../context.ts";
import {
  type Condition,
  type ConditionInput,
  findCondition,
  setCondition,
} from "../kube/conditions.ts";
import { canonical } from "../kube/canonical.ts";

type Phase = NonNullable<SandboxStatus["phase"]>;

/**
 * A starting sandbox's shown progress is rewritten at most this often: its conditions (the Ready
 * condition's reason and message, whether its disk is held to its size) and its moves between
 * Pending (not on a node yet) and Starting (on one). In a burst each sandbox passes through
 * several of them while it starts, and a write for each made the statuses most of the
 * operator's writes. Any other field (the pod, the endpoint, what was initialised), and Ready,
 * is written at once, the progress with it. Progress held back is written by the first
 * reconcile after the window, which the reconciler makes sure comes (heldBack).
 */
export const PROGRESS_EVERY_MS = 10_000;
/** The phases of a start, between which a move is progress. */
const STARTING: ReadonlySet<string> = new Set(["Pending", "Starting"]);
type Owned = Omit<SandboxStatus, "lastActivityTime">;

export class SandboxStatusBuilder {
  readonly sandbox: Sandbox;
  readonly now: string;
  #next: Owned;
  readonly #before: string;
  /** The status as it is now, but its progress (conditions and phase). */
  readonly #beforeFields: string;
  #heldBack = false;

  constructor(sandbox: Sandbox, now: Date) {
    this.sandbox = sandbox;
    this.now = now.toISOString();
    const { lastActivityTime: _ignored, ...owned } = sandbox.status ?? {};
    this.#next = structuredClone(owned);
    this.#before = canonical(this.#next);
    this.#beforeFields = canonical({ ...this.#next, conditions: undefined, phase: undefined });
  }

  get current(): Readonly<Owned> {
    return this.#next;
  }

  get phase(): Phase | undefined {
    return this.#next.phase;
  }

  set(fields: Partial<Owned>): this {
    for (const [k, v] of Object.entries(fields)) {
      if (v === undefined) delete (this.#next as Record<string, unknown>)[k];
      else (this.#next as Record<string, unknown>)[k] = v;
    }
    return this;
  }

  condition(input: ConditionInput): this {
    this.#next.conditions = setCondition(
      (this.#next.conditions ?? []) as Condition[],
      input,
      this.sandbox.metadata.generation,
      this.now,
    );
    return this;
  }

  /** The Ready condition and the phase move together. */
  phaseIs(phase: Phase, reason: string, message: string): this {
    this.#next.phase = phase;
    return this.condition({
      type: "Ready",
      status: phase === "Ready" ? "True" : "False",
      reason,
      message,
    });
  }

  conditionOf(type: string): Condition | undefined {
    return findCondition(this.#next.conditions as Condition[] | undefined, type);
  }

  get changed(): boolean {
    return canonical(this.#next) !== this.#before;
  }

  /** Whether all that changed is the progress of a start already shown as one. */
  get onlyProgress(): boolean {
    const [was, next] = [this.sandbox.status?.phase, this.#next.phase];
    if (!was || !next || !STARTING.has(was) || !STARTING.has(next)) return false;
    return (
      canonical({ ...this.#next, conditions: undefined, phase: undefined }) === this.#beforeFields
    );
  }

  /** The last write() held progress back: a reconcile must come within PROGRESS_EVERY_MS. */
  get heldBack(): boolean {
    return this.#heldBack;
  }

  /**
   * Applies the status if it changed. The resourceVersion makes it conditional: a status
   * computed from a cache that has not seen the last write is refused (409) and recomputed,
   * instead of undoing that write.
   */
  async write(ctx: Ctx): Promise<void> {
    this.#next.observedGeneration = this.sandbox.metadata.generation;
    if (!this.changed) return;
    const { name, namespace, resourceVersion, uid } = this.sandbox.metadata;
    this.#heldBack = this.onlyProgress && ctx.progressShown.pending(uid!);
    if (this.#heldBack) return;
    await ctx.kube.apply(
      SANDBOXES,
      { metadata: { name, namespace: namespace!, resourceVersion }, status: this.#next },
      "status",
    );
    if (STARTING.has(this.#next.phase ?? "")) ctx.progressShown.expect(uid!);
  }
}
