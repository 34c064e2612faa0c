/**
 * metav1.Condition handling with apimachinery's SetStatusCondition semantics: one condition per
 * type; lastTransitionTime moves only when the status changes; reason, message and
 * observedGeneration always take the new values.
 */
export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  observedGeneration?: number;
  lastTransitionTime: string;
}
export type ConditionInput = Omit<Condition, "lastTransitionTime" | "observedGeneration">;

export function setCondition(
  conditions: readonly Condition[],
  input: ConditionInput,
  generation: number | undefined,
  now: string,
): Condition[] {
  const old = conditions.find((c) => c.type === input.type);
  const next: Condition = {
    ...input,
    ...(generation !== undefined ? { observedGeneration: generation } : {}),
    lastTransitionTime: old && old.status === input.status ? old.lastTransitionTime : now,
  };
  return [...conditions.filter((c) => c.type !== input.type), next];
}

export function findCondition(
  conditions: readonly Condition[] | undefined,
  type: string,
): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}

export function isTrue(conditions: readonly Condition[] | undefined, type: string): boolean {
  return findCondition(conditions, type)?.status === "True";
}
