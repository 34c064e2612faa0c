/**
 * Finding files by glob and lines by pattern, through the jail: the one implementation behind
 * both the native routes (files.ts) and AIO's `/v1/file/find` and `/v1/file/grep` (aio.ts).
 * Both walk with `PathJail.list`, so symlinks are never descended and a walk is bounded by its
 * entry cap; both report when a bound cut the answer short.
 */
import { posix } from "node:path";
import type { JailPath, PathJail } from "./jail.ts";
import { SandboxdError, type FileEntry } from "./wire.ts";

/** Deepest walk either search makes (the list route's own limit). */
const MAX_DEPTH = 32;

/** Shell glob (*, ?, **) to a regular expression over virtual paths relative to the search root. */
export function globToRegExp(glob: string): RegExp {
  let re = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === "*" && glob[i + 1] === "*") {
      re += glob[i + 2] === "/" ? "(?:.*/)?" : ".*";
      i += glob[i + 2] === "/" ? 2 : 1;
    } else if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}

const isMagic = (segment: string) => /[*?]/.test(segment);

export interface GlobResult {
  /** Matching entries, in walk order (sorted by name per directory). */
  entries: FileEntry[];
  /** The walk or the result hit a bound: there may be more matches. */
  truncated: boolean;
}

/**
 * Entries under `root` whose path relative to it matches `pattern`. The pattern's leading
 * literal segments only narrow where the walk starts (a missing one means no match), and the
 * walk goes no deeper than the pattern can reach.
 */
export async function globEntries(
  files: PathJail,
  root: JailPath,
  pattern: string,
  limit: number,
): Promise<GlobResult> {
  const re = globToRegExp(pattern);
  const segments = pattern.split("/").filter(Boolean);
  const firstMagic = segments.findIndex(isMagic);
  // The last segment always stays in the pattern: the walk has to list it.
  const literal = segments.slice(0, Math.max(0, firstMagic < 0 ? segments.length - 1 : firstMagic));
  const rest = segments.slice(literal.length);
  const depth = rest.some((s) => s.includes("**")) ? MAX_DEPTH : Math.max(rest.length, 1);
  let base = root;
  if (literal.length > 0) {
    base = files.resolve(posix.join(root.virtual, ...literal));
    if (!base.virtual.startsWith(root.virtual + "/")) return { entries: [], truncated: false };
  }
  let listed: { entries: FileEntry[]; truncated: boolean };
  try {
    listed = await files.list(base, Math.min(depth, MAX_DEPTH));
  } catch (err) {
    // Only the root must exist; a literal part of the pattern that does not simply matches nothing.
    const absent =
      err instanceof SandboxdError && (err.code === "NOT_FOUND" || err.code === "CONFLICT");
    if (base !== root && absent) return { entries: [], truncated: false };
    throw err;
  }
  const entries: FileEntry[] = [];
  for (const e of listed.entries) {
    if (!re.test(posix.relative(root.virtual, e.path))) continue;
    if (entries.length >= limit) return { entries, truncated: true };
    entries.push(e);
  }
  return { entries, truncated: listed.truncated };
}

/** A search pattern as a RegExp; a bad one is INVALID_ARGUMENT. */
export function compilePattern(
  pattern: string,
  o: { literal?: boolean | null; ignoreCase?: boolean | null; multiline?: boolean | null },
): RegExp {
  try {
    const source = o.literal ? pattern.replace(/[.*+?^${}()|[\]\\]/g, "\\$&") : pattern;
    return new RegExp(source, `${o.ignoreCase ? "i" : ""}${o.multiline ? "gs" : ""}`);
  } catch (err) {
    throw new SandboxdError(
      "INVALID_ARGUMENT",
      `pattern is not a valid regular expression: ${(err as Error).message}`,
    );
  }
}

export interface GrepQuery {
  /** From compilePattern; with `multiline`, compiled with it. */
  pattern: RegExp;
  multiline?: boolean;
  /** A file is searched only if its name or relative path matches one of these (when any). */
  include?: RegExp[];
  /** A file is skipped if any component of its relative path matches one of these. */
  exclude?: RegExp[];
  /** Only files with one of these extensions (".py"), when set. */
  extensions?: string[] | null;
  /** Larger files are skipped. */
  maxFileBytes: number;
  maxMatches: number;
  /** Matches skipped before the first one reported. */
  offset?: number;
  before?: number;
  after?: number;
  /** A directory root is searched to this depth (default: all the way). */
  recursive?: boolean;
}

export interface GrepHit {
  path: string;
  /** 1-based. */
  line: number;
  text: string;
  before?: string[];
  after?: string[];
}

export interface GrepResult {
  hits: GrepHit[];
  filesSearched: number;
  filesMatched: number;
  /** `maxMatches` was reached: there are more. */
  truncated: boolean;
  /** The walk hit its entry cap: files beyond it were not searched. */
  walkTruncated: boolean;
}

/**
 * Lines matching `q.pattern` in `root` (a file, or a directory walked without following
 * symlinks). Binary files (a NUL in the first 8000 bytes, as grep decides) are skipped.
 */
export async function grepFiles(
  files: PathJail,
  root: JailPath,
  q: GrepQuery,
): Promise<GrepResult> {
  const stat = await files.stat(root);
  let candidates: FileEntry[] = [stat];
  let walkTruncated = false;
  if (stat.type !== "file") {
    const listed = await files.list(root, q.recursive === false ? 1 : MAX_DEPTH);
    candidates = listed.entries;
    walkTruncated = listed.truncated;
  }
  const include = q.include ?? [];
  const exclude = q.exclude ?? [];
  const before = q.before ?? 0;
  const after = q.after ?? 0;
  let skip = q.offset ?? 0;
  const hits: GrepHit[] = [];
  const matched = new Set<string>();
  let searched = 0;
  let truncated = false;
  for (const entry of candidates) {
    if (entry.type !== "file" || entry.size > q.maxFileBytes) continue;
    const rel = posix.relative(root.virtual, entry.path) || entry.name;
    if (include.length && !include.some((re) => re.test(entry.name) || re.test(rel))) continue;
    if (rel.split("/").some((part) => exclude.some((re) => re.test(part) || re.test(rel))))
      continue;
    if (q.extensions && !q.extensions.includes(posix.extname(entry.name))) continue;
    const data = await readAll(files, entry.path);
    if (data.subarray(0, 8000).includes(0)) continue; // binary, as grep skips it
    searched++;
    const lines = data.toString("utf8").split("\n");
    const lineHits = q.multiline
      ? multilineHits(q.pattern, lines)
      : lines.flatMap((l, i) => (q.pattern.test(l) ? [i] : []));
    for (const i of lineHits) {
      if (skip > 0) {
        skip--;
        continue;
      }
      if (hits.length >= q.maxMatches) {
        truncated = true;
        break;
      }
      matched.add(entry.path);
      hits.push({
        path: entry.path,
        line: i + 1,
        text: lines[i]!,
        ...(before ? { before: lines.slice(Math.max(0, i - before), i) } : {}),
        ...(after ? { after: lines.slice(i + 1, i + 1 + after) } : {}),
      });
    }
    if (truncated) break;
  }
  return { hits, filesSearched: searched, filesMatched: matched.size, truncated, walkTruncated };
}

/** Line indexes where a multiline (dot-all) pattern's matches start. */
function multilineHits(pattern: RegExp, lines: string[]): number[] {
  const text = lines.join("\n");
  const starts: number[] = [];
  let at = 0;
  for (let i = 0; i < lines.length; i++) {
    starts.push(at);
    at += lines[i]!.length + 1;
  }
  const hits = new Set<number>();
  pattern.lastIndex = 0;
  for (const m of text.matchAll(pattern)) {
    let line = starts.findLastIndex((s) => s <= m.index);
    if (line < 0) line = 0;
    hits.add(line);
    if (m[0].length === 0) break;
  }
  return [...hits];
}

/** A whole (size-bounded) file through the jail. */
async function readAll(files: PathJail, path: string): Promise<Buffer> {
  const { fh } = await files.openFileForRead(files.resolve(path));
  try {
    return await fh.readFile();
  } finally {
    await fh.close();
  }
}
