/**
 * The recent output of one background process, for readers that attach late: chunks of its
 * combined output (stdout and stderr as they arrived), addressed by byte offset, the oldest
 * dropped once the ring holds more than its capacity. Chunks always hold whole UTF-8 characters,
 * so any chunk (and any suffix of one that starts on a character) decodes on its own.
 */

export interface OutputChunk {
  stream: "stdout" | "stderr";
  /** Offset of the chunk's first byte in the combined output. */
  offset: number;
  bytes: Buffer;
}

/** A held chunk; `room` is the buffer `bytes` views, with space to merge the next small chunk. */
interface HeldChunk extends OutputChunk {
  room?: Buffer;
}

/**
 * Small chunks of one stream are merged up to this size (or a quarter of the ring), so a chatty
 * process stays few chunks, while dropping the oldest chunk never frees much of the ring at once.
 */
const MERGE_BYTES = 16 * 1024;
/** What a chunk costs beyond its bytes: counted, so a million one-byte chunks cannot fit. */
const CHUNK_COST = 64;

export class OutputRing {
  /** Bytes written so far: the offset of the next chunk. */
  end = 0;
  /** Memory held now: the bytes, and a small cost per chunk. */
  size = 0;
  private chunks: HeldChunk[] = [];
  private head = 0;
  private readonly capacity: number;
  private readonly mergeBytes: number;

  constructor(capacity: number) {
    this.capacity = capacity;
    this.mergeBytes = Math.min(MERGE_BYTES, Math.floor(capacity / 4));
  }

  /** Offset of the oldest byte still held (`end` when nothing is). */
  get start(): number {
    return this.chunks[this.head]?.offset ?? this.end;
  }

  /**
   * Adds a chunk of whole characters and drops what no longer fits. Returns the change in memory
   * held (negative when more was dropped than added).
   */
  append(stream: OutputChunk["stream"], bytes: Buffer): number {
    if (bytes.length === 0) return 0;
    const before = this.size;
    const offset = this.end;
    this.end += bytes.length;
    const room = this.capacity - CHUNK_COST;
    if (bytes.length > room) {
      // Only the tail fits: everything held before goes, and the tail starts on a character.
      this.clear();
      const from = charStart(bytes, bytes.length - room);
      bytes = bytes.subarray(from);
      this.push({ stream, offset: offset + from, bytes });
      return this.size - before;
    }
    const last = this.chunks.at(-1);
    if (
      last &&
      this.chunks.length > this.head &&
      last.stream === stream &&
      last.bytes.length + bytes.length <= this.mergeBytes
    ) {
      // Into spare room, growing it by doubling: merging stays linear in the bytes merged.
      // Views handed out earlier stay valid: bytes already written are never moved or changed.
      const length = last.bytes.length + bytes.length;
      if (!last.room || last.room.length < length) {
        const room = Buffer.allocUnsafe(Math.min(this.mergeBytes, Math.max(2 * length, 1024)));
        last.bytes.copy(room);
        last.room = room;
      }
      bytes.copy(last.room, last.bytes.length);
      last.bytes = last.room.subarray(0, length);
      this.size += bytes.length;
    } else {
      this.push({ stream, offset, bytes });
    }
    while (this.size > this.capacity) this.dropOldest();
    return this.size - before;
  }

  /** Drops the oldest chunk; returns the memory freed (0 when empty). */
  dropOldest(): number {
    const chunk = this.chunks[this.head];
    if (!chunk) return 0;
    this.chunks[this.head++] = undefined as unknown as HeldChunk;
    this.size -= chunk.bytes.length + CHUNK_COST;
    // Compact now and then, so dropping stays O(1) without the array growing for ever.
    if (this.head > 1024 && this.head * 2 > this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.head = 0;
    }
    return chunk.bytes.length + CHUNK_COST;
  }

  /** Drops everything; returns the memory freed. */
  clear(): number {
    const freed = this.size;
    this.chunks = [];
    this.head = 0;
    this.size = 0;
    return freed;
  }

  /**
   * The held chunks from `offset` on (which must be at least `start`), the first one cut to begin
   * there, or at the next character when `offset` falls inside one.
   */
  *from(offset: number): Generator<OutputChunk> {
    let lo = this.head;
    let hi = this.chunks.length;
    // The last chunk starting at or before `offset`.
    while (hi - lo > 1) {
      const mid = (lo + hi) >>> 1;
      if (this.chunks[mid]!.offset <= offset) lo = mid;
      else hi = mid;
    }
    for (let i = lo; i < this.chunks.length; i++) {
      const chunk = this.chunks[i]!;
      const skip = offset - chunk.offset;
      if (skip >= chunk.bytes.length) continue;
      // A view, not the held chunk: a merge later extends the held one, never this.
      const from = skip <= 0 ? 0 : charStart(chunk.bytes, skip);
      if (from < chunk.bytes.length)
        yield {
          stream: chunk.stream,
          offset: chunk.offset + from,
          bytes: chunk.bytes.subarray(from),
        };
    }
  }

  private push(chunk: HeldChunk): void {
    this.chunks.push(chunk);
    this.size += chunk.bytes.length + CHUNK_COST;
  }
}

/** The first index at or after `i` that does not continue a UTF-8 character. */
function charStart(bytes: Buffer, i: number): number {
  while (i < bytes.length && (bytes[i]! & 0xc0) === 0x80) i++;
  return i;
}
