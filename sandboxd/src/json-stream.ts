/**
 * A streaming parser for one flat JSON object whose one large string field is too big to hold
 * twice. AIO's `/v1/file/write` carries a whole upload (DeerFlow sends each one, up to 50 MiB,
 * base64, in a single request) in its `content` string, and the field that says how to decode it
 * (`encoding`) may come after it. So the large field is unescaped into a sink as the body arrives,
 * and the small fields are collected and parsed once complete.
 *
 * Only what such a body needs: an object of strings, numbers, booleans and null. A nested value is
 * refused, as is anything that is not JSON.
 */
import { SandboxdError } from "./wire.ts";

/** Small fields are bounded: only the streamed field may be large. */
const MAX_SMALL_VALUE_BYTES = 64 * 1024;
const FLUSH_BYTES = 1024 * 1024;

type State =
  | "start" // before `{`
  | "keyOrEnd" // after `{`
  | "key" // inside a key string
  | "colon"
  | "value"
  | "small" // inside a small string value
  | "literal" // a number, true, false or null
  | "big" // inside the streamed string
  | "commaOrEnd"
  | "keyStart" // after `,`
  | "done";

const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);
const SIMPLE_ESCAPES: Record<number, number> = {
  0x22: 0x22, // \"
  0x5c: 0x5c, // \\
  0x2f: 0x2f, // \/
  0x62: 0x08, // \b
  0x66: 0x0c, // \f
  0x6e: 0x0a, // \n
  0x72: 0x0d, // \r
  0x74: 0x09, // \t
};
const REPLACEMENT = Buffer.from("\uFFFD");

function bad(message: string): SandboxdError {
  return new SandboxdError("INVALID_ARGUMENT", `request body is not valid JSON: ${message}`);
}

export class FlatJsonStream {
  /** The small fields, parsed. */
  readonly fields: Record<string, unknown> = {};
  /** Whether the streamed field was present (as a string). */
  sawBig = false;
  private readonly bigKey: string;
  private state: State = "start";
  private raw: number[] = [];
  private key = "";
  private escaped = false;
  // Streamed-string unescaping: inside an escape, collecting \uXXXX, a pending high surrogate.
  private esc: "none" | "backslash" | "unicode" = "none";
  private hex = "";
  private highSurrogate: number | null = null;
  private out: Buffer[] = [];
  private outBytes = 0;

  constructor(bigKey: string) {
    this.bigKey = bigKey;
  }

  get complete(): boolean {
    return this.state === "done";
  }

  /** Parses a chunk; unescaped bytes of the streamed field collect for `drain`. */
  feed(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.state === "big") {
        i = this.feedBig(chunk, i);
        continue;
      }
      const c = chunk[i]!;
      i++;
      switch (this.state) {
        case "start":
          if (WS.has(c)) break;
          if (c !== 0x7b) throw bad("expected an object");
          this.state = "keyOrEnd";
          break;
        case "keyOrEnd":
        case "keyStart":
          if (WS.has(c)) break;
          if (c === 0x7d && this.state === "keyOrEnd") this.state = "done";
          else if (c === 0x22) this.begin("key", c);
          else throw bad("expected a field name");
          break;
        case "key":
        case "small":
          this.addRaw(c);
          if (this.escaped) this.escaped = false;
          else if (c === 0x5c) this.escaped = true;
          else if (c === 0x22) this.endString();
          break;
        case "colon":
          if (WS.has(c)) break;
          if (c !== 0x3a) throw bad("expected ':'");
          this.state = "value";
          break;
        case "value":
          if (WS.has(c)) break;
          if (c === 0x22 && this.key === this.bigKey) {
            if (this.sawBig) throw bad(`field ${this.bigKey} appears twice`);
            this.sawBig = true;
            this.state = "big";
          } else if (c === 0x22) this.begin("small", c);
          else if (c === 0x7b || c === 0x5b) {
            throw new SandboxdError(
              "INVALID_ARGUMENT",
              `${this.key}: expected a string, number, boolean or null`,
            );
          } else this.begin("literal", c);
          break;
        case "literal":
          if (c === 0x2c || c === 0x7d || WS.has(c)) {
            this.setField(this.rawText());
            this.state = "commaOrEnd";
            i--; // the delimiter is the next state's
          } else this.addRaw(c);
          break;
        case "commaOrEnd":
          if (WS.has(c)) break;
          if (c === 0x2c) this.state = "keyStart";
          else if (c === 0x7d) this.state = "done";
          else throw bad("expected ',' or '}'");
          break;
        case "done":
          if (!WS.has(c)) throw bad("unexpected data after the object");
          break;
      }
    }
  }

  /** Unescaped pieces ready for the sink, once a megabyte or more has collected (or `all`). */
  drain(all = false): Buffer[] {
    if (this.outBytes === 0 || (!all && this.outBytes < FLUSH_BYTES)) return [];
    const out = this.out;
    this.out = [];
    this.outBytes = 0;
    return out;
  }

  /** Throws unless the body was one whole object. */
  end(): void {
    if (this.state !== "done") throw bad("the body ended early");
  }

  private begin(state: "key" | "small" | "literal", first: number): void {
    this.state = state;
    this.raw = [first];
    this.escaped = false;
  }

  private addRaw(c: number): void {
    if (this.raw.length >= MAX_SMALL_VALUE_BYTES) {
      throw new SandboxdError(
        "INVALID_ARGUMENT",
        `${this.state === "key" ? "a field name" : this.key} is longer than ${MAX_SMALL_VALUE_BYTES} bytes`,
      );
    }
    this.raw.push(c);
  }

  private rawText(): unknown {
    try {
      return JSON.parse(Buffer.from(this.raw).toString("utf8"));
    } catch {
      throw bad(this.state === "key" ? "a field name" : `the value of ${this.key}`);
    }
  }

  private endString(): void {
    const value = this.rawText();
    if (this.state === "key") {
      this.key = value as string;
      this.state = "colon";
    } else {
      this.setField(value);
      this.state = "commaOrEnd";
    }
  }

  private setField(value: unknown): void {
    if (this.key === this.bigKey) this.sawBig = true;
    this.fields[this.key] = value;
  }

  /**
   * Unescapes the streamed string from `i` on; returns where it stopped. Runs between escapes are
   * found with indexOf and copied whole: a byte-by-byte loop costs seconds per 100 MiB. Raw
   * control characters, which strict JSON forbids inside strings, are taken as they are.
   */
  private feedBig(chunk: Buffer, i: number): number {
    let quote = -2; // next `"` at or after i (-1: none in this chunk), found lazily
    let backslash = -2;
    while (i < chunk.length) {
      if (this.esc === "none") {
        if (quote !== -1 && quote < i) quote = chunk.indexOf(0x22, i);
        if (backslash !== -1 && backslash < i) backslash = chunk.indexOf(0x5c, i);
        const stop =
          quote === -1 ? backslash : backslash === -1 ? quote : Math.min(quote, backslash);
        const end = stop === -1 ? chunk.length : stop;
        if (end > i) {
          if (this.highSurrogate !== null) this.lone();
          this.emit(chunk.subarray(i, end));
        }
        if (stop === -1) return chunk.length;
        i = stop + 1;
        if (stop === quote) {
          if (this.highSurrogate !== null) this.lone();
          this.state = "commaOrEnd";
          return i;
        }
        this.esc = "backslash";
        continue;
      }
      const c = chunk[i]!;
      i++;
      if (this.esc === "backslash") {
        if (c === 0x75) {
          this.esc = "unicode";
          this.hex = "";
          continue;
        }
        const simple = SIMPLE_ESCAPES[c];
        if (simple === undefined) throw bad(`an unknown escape in ${this.bigKey}`);
        if (this.highSurrogate !== null) this.lone();
        this.emit(Buffer.of(simple));
        this.esc = "none";
        continue;
      }
      // \uXXXX
      this.hex += String.fromCharCode(c);
      if (this.hex.length < 4) continue;
      if (!/^[0-9a-fA-F]{4}$/.test(this.hex)) throw bad(`a bad \\u escape in ${this.bigKey}`);
      this.esc = "none";
      this.codeUnit(parseInt(this.hex, 16));
    }
    return i;
  }

  private codeUnit(u: number): void {
    if (u >= 0xd800 && u <= 0xdbff) {
      if (this.highSurrogate !== null) this.lone();
      this.highSurrogate = u;
      return;
    }
    if (u >= 0xdc00 && u <= 0xdfff) {
      if (this.highSurrogate === null) {
        this.emit(REPLACEMENT);
        return;
      }
      const cp = 0x10000 + ((this.highSurrogate - 0xd800) << 10) + (u - 0xdc00);
      this.highSurrogate = null;
      this.emit(Buffer.from(String.fromCodePoint(cp)));
      return;
    }
    if (this.highSurrogate !== null) this.lone();
    this.emit(Buffer.from(String.fromCharCode(u)));
  }

  /** A high surrogate with no low one after it: encoded as U+FFFD, as Buffer.from(string) does. */
  private lone(): void {
    this.highSurrogate = null;
    this.emit(REPLACEMENT);
  }

  private emit(b: Buffer): void {
    // Not copied: a stream hands each chunk over for good, and small escapes are fresh buffers.
    this.out.push(b);
    this.outBytes += b.length;
  }
}
