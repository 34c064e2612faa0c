/** OutputRing: offsets in the combined output, bounded size, whole characters only. */
import { describe, expect, it } from "vitest";
import { OutputRing, type OutputChunk } from "../src/output-ring.ts";

const text = (chunks: Iterable<OutputChunk>) =>
  [...chunks].map((c) => `${c.stream}@${c.offset}:${c.bytes.toString()}`);

describe("OutputRing", () => {
  it("addresses stdout and stderr by offset in one combined output", () => {
    const ring = new OutputRing(4096);
    ring.append("stdout", Buffer.from("abc"));
    ring.append("stderr", Buffer.from("de"));
    ring.append("stdout", Buffer.from("f"));
    expect(ring.end).toBe(6);
    expect(ring.start).toBe(0);
    expect(text(ring.from(0))).toEqual(["stdout@0:abc", "stderr@3:de", "stdout@5:f"]);
    expect(text(ring.from(4))).toEqual(["stderr@4:e", "stdout@5:f"]);
    expect(text(ring.from(6))).toEqual([]);
  });

  it("merges small chunks of one stream, without moving bytes already handed out", () => {
    const ring = new OutputRing(1 << 20);
    ring.append("stdout", Buffer.from("ab"));
    const [first] = ring.from(0);
    ring.append("stdout", Buffer.from("cd"));
    expect(first!.bytes.toString()).toBe("ab");
    expect(text(ring.from(0))).toEqual(["stdout@0:abcd"]);
    for (let i = 0; i < 10_000; i++) ring.append("stdout", Buffer.from("x"));
    expect([...ring.from(0)].length).toBeLessThan(5);
  });

  it("drops the oldest output past its capacity, counting a cost per chunk", () => {
    const ring = new OutputRing(4096);
    for (let i = 0; i < 100; i++) ring.append(i % 2 ? "stderr" : "stdout", Buffer.alloc(100, 97));
    expect(ring.end).toBe(10_000);
    expect(ring.size).toBeLessThanOrEqual(4096);
    expect(ring.start).toBeGreaterThan(10_000 - 4096);
    const held = [...ring.from(ring.start)];
    expect(held[0]!.offset).toBe(ring.start);
    expect(held.reduce((n, c) => n + c.bytes.length, 0)).toBe(ring.end - ring.start);
    // One-byte chunks alternating streams cannot pile up: each costs more than its byte.
    const tiny = new OutputRing(4096);
    for (let i = 0; i < 10_000; i++) tiny.append(i % 2 ? "stderr" : "stdout", Buffer.from("x"));
    expect([...tiny.from(tiny.start)].length).toBeLessThan(4096 / 64);
  });

  it("keeps the tail of a chunk bigger than the ring, starting on a character", () => {
    const ring = new OutputRing(4096);
    ring.append("stdout", Buffer.from("old"));
    ring.append("stdout", Buffer.from("é".repeat(5000)));
    expect(ring.end).toBe(3 + 10_000);
    const [tail] = ring.from(ring.start);
    expect(tail!.bytes.toString()).toMatch(/^é+$/);
    expect(tail!.offset).toBe(ring.start);
    expect(ring.size).toBeLessThanOrEqual(4096);
  });

  it("starts a replay inside a character at the next one", () => {
    const ring = new OutputRing(4096);
    ring.append("stdout", Buffer.from("aé€b"));
    // a=0, é=1..2, €=3..5, b=6
    expect(text(ring.from(2))).toEqual(["stdout@3:€b"]);
    expect(text(ring.from(4))).toEqual(["stdout@6:b"]);
  });

  it("compacts after many drops and stays addressable", () => {
    const ring = new OutputRing(8192);
    for (let i = 0; i < 50_000; i++) {
      ring.append(i % 2 ? "stderr" : "stdout", Buffer.from(String(i % 10)));
    }
    expect(ring.end).toBe(50_000);
    const held = [...ring.from(ring.start)];
    expect(held.at(-1)!.bytes.toString()).toBe("9");
    expect(held.at(-1)!.offset).toBe(49_999);
    expect(ring.clear()).toBeGreaterThan(0);
    expect(ring.start).toBe(ring.end);
  });
});
