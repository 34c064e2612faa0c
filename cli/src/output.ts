/** Results on stdout: JSON with --json, aligned text otherwise. Nothing else goes to stdout. */

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

export function printLine(line: string): void {
  process.stdout.write(`${line}\n`);
}

/** A table with a header row, columns padded to their widest cell. */
export function printTable(header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  for (const row of [header, ...rows]) {
    printLine(
      row
        .map((c, i) => (i === row.length - 1 ? c : c.padEnd(widths[i]!)))
        .join("  ")
        .trimEnd(),
    );
  }
}

export function formatLabels(labels: Record<string, string> | undefined): string {
  return Object.entries(labels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
}

/** Progress and hints for a person: stderr only. */
export function note(line: string): void {
  process.stderr.write(`${line}\n`);
}
