/**
 * A streaming multipart/form-data reader for envd's `POST /files` (what the E2B SDKs send for
 * `files.write`): each part's body is handed on as it arrives, so a 100 MiB upload never sits
 * in memory. Only what uploads need: part headers (name, filename) and bodies.
 */
import type { Readable } from "node:stream";

const MAX_HEADER_BYTES = 16 * 1024;

export class MultipartError extends Error {}

export interface Part {
  name: string | undefined;
  filename: string | undefined;
  body: AsyncGenerator<Buffer>;
}

export function boundaryOf(contentType: string): string {
  const m = /;\s*boundary=(?:"([^"]{1,70})"|([^\s;]{1,70}))/i.exec(contentType);
  if (!m) throw new MultipartError("multipart body without a boundary");
  return (m[1] ?? m[2])!;
}

class Reader {
  buf: Buffer = Buffer.from("\r\n"); // so the first delimiter looks like every other one
  private readonly it: AsyncIterator<Buffer>;
  done = false;
  constructor(src: Readable) {
    this.it = src[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  }
  /** Reads more; false at the end of the input. */
  async fill(): Promise<boolean> {
    if (this.done) return false;
    const r = await this.it.next();
    if (r.done) {
      this.done = true;
      return false;
    }
    this.buf = this.buf.length ? Buffer.concat([this.buf, r.value]) : r.value;
    return true;
  }
  async need(n: number): Promise<void> {
    while (this.buf.length < n) {
      if (!(await this.fill())) throw new MultipartError("the multipart body ended early");
    }
  }
}

/** The parts of a multipart body, in order; each part's body must be read (or is skipped). */
export async function* readParts(src: Readable, boundary: string): AsyncGenerator<Part> {
  const r = new Reader(src);
  const delim = Buffer.from(`\r\n--${boundary}`);
  // The preamble, up to the first delimiter, is ignored.
  for (;;) {
    const at = r.buf.indexOf(delim);
    if (at >= 0) {
      r.buf = r.buf.subarray(at + delim.length);
      break;
    }
    r.buf = r.buf.subarray(Math.max(0, r.buf.length - delim.length));
    if (!(await r.fill())) throw new MultipartError("no multipart boundary in the body");
  }
  for (;;) {
    await r.need(2);
    if (r.buf.subarray(0, 2).toString() === "--") return; // the closing delimiter
    let end: number;
    while ((end = r.buf.indexOf("\r\n\r\n")) < 0) {
      if (r.buf.length > MAX_HEADER_BYTES)
        throw new MultipartError("multipart part headers too large");
      if (!(await r.fill())) throw new MultipartError("the multipart body ended in part headers");
    }
    const headers = r.buf.subarray(0, end).toString("utf8");
    r.buf = r.buf.subarray(end + 4);
    const disposition = /^content-disposition:(.*)$/im.exec(headers)?.[1] ?? "";
    const param = (key: string) =>
      new RegExp(`;\\s*${key}="([^"]*)"`, "i").exec(disposition)?.[1] ??
      new RegExp(`;\\s*${key}=([^;\\s]+)`, "i").exec(disposition)?.[1];
    let finished = false;
    const body = (async function* () {
      for (;;) {
        const at = r.buf.indexOf(delim);
        if (at >= 0) {
          const chunk = r.buf.subarray(0, at);
          r.buf = r.buf.subarray(at + delim.length);
          finished = true;
          if (chunk.length) yield chunk;
          return;
        }
        // Keep what may be the start of the delimiter; hand on the rest.
        const keep = Math.min(r.buf.length, delim.length - 1);
        const chunk = r.buf.subarray(0, r.buf.length - keep);
        r.buf = r.buf.subarray(r.buf.length - keep);
        if (chunk.length) yield Buffer.from(chunk);
        if (!(await r.fill())) throw new MultipartError("the multipart body ended inside a part");
      }
    })();
    yield { name: param("name"), filename: param("filename"), body };
    if (!finished) for await (const chunk of body) void chunk; // a part the caller skipped
  }
}
