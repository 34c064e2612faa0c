/**
 * The code interpreter's `Result` (one Jupyter MIME bundle, named by E2B's short keys) as the
 * contract's `CodeResult`. E2B's `data` (the table form of a pandas DataFrame) becomes `table`
 * when it has a table's shape; formats the contract does not name stay in `extra`.
 */
import type { Result } from "@e2b/code-interpreter";
import type { CodeResult } from "../../types.ts";

const TEXT_FORMATS = [
  "text",
  "html",
  "markdown",
  "svg",
  "png",
  "jpeg",
  "latex",
  "javascript",
] as const;

export function codeResult(r: Result): CodeResult {
  const out: CodeResult = { isMainResult: Boolean(r.isMainResult) };
  for (const k of TEXT_FORMATS) {
    const v = r[k];
    if (typeof v === "string") out[k] = v;
  }
  if (r.json !== undefined) out.json = parseJson(r.json);
  const extra: Record<string, unknown> = { ...r.extra };
  if (r.pdf !== undefined) extra["application/pdf"] = r.pdf;
  if (r.chart !== undefined) extra["application/vnd.e2b.chart+json"] = r.chart;
  if (r.data !== undefined) {
    const table = tableOf(r.data);
    if (table) out.table = table;
    else extra["application/vnd.e2b.data+json"] = r.data;
  }
  if (Object.keys(extra).length) out.extra = extra;
  return out;
}

function parseJson(v: unknown): unknown {
  if (typeof v !== "string") return v;
  try {
    return JSON.parse(v) as unknown;
  } catch {
    return v;
  }
}

/**
 * Columns and rows from the shapes a DataFrame serialises to: `{columns, data}` (pandas
 * "split"), `{columns, rows}`, a list of records, or a record of columns ("list").
 */
export function tableOf(data: unknown): CodeResult["table"] | undefined {
  const d = parseJson(data);
  if (Array.isArray(d)) {
    if (!d.length || !d.every((r) => r && typeof r === "object" && !Array.isArray(r)))
      return undefined;
    const columns = [...new Set(d.flatMap((r) => Object.keys(r as object)))];
    return { columns, rows: d.map((r) => columns.map((c) => (r as Record<string, unknown>)[c])) };
  }
  if (!d || typeof d !== "object") return undefined;
  const o = d as Record<string, unknown>;
  const rows = o.data ?? o.rows;
  if (Array.isArray(o.columns) && Array.isArray(rows) && rows.every(Array.isArray))
    return { columns: o.columns.map(String), rows: rows as unknown[][] };
  const cols = Object.entries(o);
  if (cols.length && cols.every(([, v]) => Array.isArray(v))) {
    const n = Math.max(...cols.map(([, v]) => (v as unknown[]).length));
    return {
      columns: cols.map(([k]) => k),
      rows: Array.from({ length: n }, (_, i) => cols.map(([, v]) => (v as unknown[])[i])),
    };
  }
  return undefined;
}
