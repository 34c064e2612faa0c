/**
 * JSON with object keys sorted at every level and lists of conditions ordered by type: two
 * statuses that mean the same compare equal however the API server ordered their fields.
 */
export function canonical(value: unknown): string {
  return JSON.stringify(sortDeep(value));
}

function sortDeep(value: unknown): unknown {
  if (Array.isArray(value)) {
    const items = value.map(sortDeep);
    const byType = items.every((i) => typeof (i as { type?: unknown })?.type === "string");
    return byType
      ? [...items].sort((a, b) =>
          String((a as { type: string }).type).localeCompare((b as { type: string }).type),
        )
      : items;
  }
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>)
        .filter(([, v]) => v !== undefined)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => [k, sortDeep(v)]),
    );
  }
  return value;
}
