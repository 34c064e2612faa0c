/**
 * Contract: terminals (`sandbox.pty`). A bash at the created size that follows a resize, `top`
 * drawing with escape sequences and quitting on `q`, the exit status through wait(), a second
 * client (a resumed instance) re-attaching to a running terminal and seeing its recent output,
 * kill leaving no process, bad sizes refused, and the limit on terminals. A target without
 * terminals must refuse every call with NOT_SUPPORTED.
 */
import { randomInt } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import type { PtyHandle, SandboxInstance } from "@sandpit/sdk";
import { expectSandboxError, type ContractTarget, type Has } from "./suite.ts";

/** A terminal's output as text, with a way to wait for a pattern in it. */
class Screen {
  text = "";
  private readonly decoder = new TextDecoder();
  readonly onData = (data: Uint8Array): void => {
    this.text += this.decoder.decode(data, { stream: true });
  };

  async waitFor(re: RegExp, ms = 20_000): Promise<RegExpExecArray> {
    const until = Date.now() + ms;
    for (;;) {
      const m = re.exec(this.text);
      if (m) return m;
      if (Date.now() > until)
        throw new Error(`no ${re} on the terminal after ${ms} ms: ${JSON.stringify(this.text)}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

export function ptyContract(
  sandbox: () => SandboxInstance,
  target: () => ContractTarget,
  has: Has,
): void {
  describe("pty", () => {
    const opened: PtyHandle[] = [];
    afterEach(async () => {
      await Promise.all(opened.splice(0).map((h) => h.kill().catch(() => undefined)));
    });

    if (!has("pty")) {
      it("is refused with NOT_SUPPORTED (the target has no terminals)", async () => {
        const pty = sandbox().pty;
        const onData = () => undefined;
        await expectSandboxError(pty.create({ cols: 80, rows: 24, onData }), "NOT_SUPPORTED");
        await expectSandboxError(pty.connect(1, { onData }), "NOT_SUPPORTED");
        await expectSandboxError(pty.sendInput(1, "x"), "NOT_SUPPORTED");
        await expectSandboxError(pty.resize(1, { cols: 80, rows: 24 }), "NOT_SUPPORTED");
        await expectSandboxError(pty.kill(1), "NOT_SUPPORTED");
      });
      return;
    }

    it("runs bash at the created size with the sandbox's environment, and resizes", async () => {
      const screen = new Screen();
      const h = await sandbox().pty.create({
        cols: 91,
        rows: 17,
        onData: screen.onData,
        envs: { PTY_VAR: "from-pty" },
      });
      opened.push(h);
      expect(h.pid).toBeGreaterThan(0);
      // $((...)) is expanded only in the output, never in the echoed input.
      await h.sendInput('stty size; echo "$PTY_VAR|$SANDPIT_SANDBOX_VAR|$(pwd)|$((6*7))"\r');
      // The workspace is /mnt/user-data/workspace, except on the local provider without
      // isolation, where a terminal shows the real directory (its bytes are never rewritten).
      await screen.waitFor(/17 91\r?\nfrom-pty\|from-create\|\S*\/user-data\/workspace\|42/);
      await h.resize({ cols: 120, rows: 40 });
      await h.sendInput("stty size; echo done-$((1+1))\r");
      await screen.waitFor(/40 120\r?\ndone-2/);
      await sandbox().pty.resize(h.pid, { cols: 100, rows: 30 });
      await sandbox().pty.sendInput(h.pid, "stty size; echo done-$((2+1))\r");
      await screen.waitFor(/30 100\r?\ndone-3/);
    });

    it("runs top, which draws with escape sequences and quits on q", async () => {
      const screen = new Screen();
      const h = await sandbox().pty.create({
        cols: 100,
        rows: 30,
        onData: screen.onData,
        command: "top -d 0.5",
      });
      opened.push(h);
      // A CSI escape sequence (cursor movement, colours), then top's summary.
      await screen.waitFor(new RegExp(String.raw`\u001b\[[0-9;?]*[A-Za-z][\s\S]*Tasks:`));
      await h.resize({ cols: 60, rows: 20 });
      await h.sendInput("q");
      expect(await h.wait()).toEqual({ exitCode: 0 });
    });

    it("reports the exit status of the terminal's program through wait()", async () => {
      const screen = new Screen();
      const h = await sandbox().pty.create({ cols: 80, rows: 24, onData: screen.onData });
      opened.push(h);
      await h.sendInput("exit 3\r");
      expect(await h.wait()).toEqual({ exitCode: 3 });
      await expectSandboxError(h.sendInput("x"), "CONFLICT");
      expect(await h.kill()).toBe(false);
    });

    it(
      has("ptyReplay")
        ? "lets a new client re-attach, replaying recent output, and type"
        : "lets a new client re-attach, seeing new output only (no replay), and type",
      async () => {
        const first = new Screen();
        const h = await sandbox().pty.create({ cols: 80, rows: 24, onData: first.onData });
        opened.push(h);
        await h.sendInput("echo first-$((20+1))\r");
        await first.waitFor(/first-21/);
        await h.disconnect();
        await h.disconnect(); // a second disconnect is a no-op

        const other = await target().provider.resume(sandbox().sandboxId);
        const second = new Screen();
        const again = await other.pty.connect(h.pid, { onData: second.onData });
        expect(again.pid).toBe(h.pid);
        // Asked for no replay, every target gives new output only.
        const third = new Screen();
        const quiet = await other.pty.connect(h.pid, { onData: third.onData, replay: false });
        if (has("ptyReplay")) await second.waitFor(/first-21/);
        await again.sendInput("echo second-$((20+2))\r");
        await second.waitFor(/second-22/);
        await third.waitFor(/second-22/);
        expect(third.text).not.toContain("first-21");
        // Without replay, the new client sees what came after it attached, and only that.
        if (!has("ptyReplay")) expect(second.text).not.toContain("first-21");
        await quiet.disconnect();
        await again.sendInput("exit 7\r");
        expect(await again.wait()).toEqual({ exitCode: 7 });
      },
    );

    it("kill leaves no process of the terminal behind", async () => {
      const screen = new Screen();
      const h = await sandbox().pty.create({ cols: 80, rows: 24, onData: screen.onData });
      opened.push(h);
      const marker = `${randomInt(100_000, 999_999)}`;
      // A background job, a pipeline and a foreground command: three process groups.
      await h.sendInput(`sleep 1${marker} & sleep 2${marker} | cat & echo started-$((1))\r`);
      await screen.waitFor(/started-1/);
      await h.sendInput(`sleep 3${marker}\r`);
      const ps = () => sandbox().commands.run("ps -eo stat=,args=");
      const until = Date.now() + 10_000;
      while (!(await ps()).stdout.includes(`sleep 3${marker}`) && Date.now() < until)
        await new Promise((r) => setTimeout(r, 100));
      expect(await sandbox().pty.kill(h.pid)).toBe(true);
      expect(await h.wait()).toEqual({ exitCode: 137 });
      const live = (await ps()).stdout
        .split("\n")
        .filter((l) => l.includes(marker) && !l.startsWith("Z") && !l.includes("ps -eo"));
      expect(live).toEqual([]);
      expect(await sandbox().pty.kill(h.pid)).toBe(false);
    });

    it("refuses bad sizes and unknown terminals clearly", async () => {
      const pty = sandbox().pty;
      const onData = () => undefined;
      for (const size of [
        { cols: 0, rows: 24 },
        { cols: 80, rows: 1001 },
        { cols: 1.5, rows: 24 },
        { cols: Number.NaN, rows: 24 },
      ])
        await expectSandboxError(pty.create({ ...size, onData }), "INVALID_ARGUMENT");
      const h = await pty.create({ cols: 80, rows: 24, onData, command: "cat" });
      opened.push(h);
      await expectSandboxError(h.resize({ cols: 80, rows: 0 }), "INVALID_ARGUMENT");
      await expectSandboxError(pty.resize(h.pid, { cols: 2000, rows: 5 }), "INVALID_ARGUMENT");
      await expectSandboxError(pty.connect(999_999_999, { onData }), "NOT_FOUND");
      await expectSandboxError(pty.sendInput(999_999_999, "x"), "NOT_FOUND");
      await expectSandboxError(pty.connect(-1, { onData }), "INVALID_ARGUMENT");
    });

    it(
      has("limits")
        ? "refuses terminals past the limit with CAPACITY_EXCEEDED"
        : "runs many terminals at once, each on its own (no limit to reach)",
      async () => {
        const pty = sandbox().pty;
        if (!has("limits")) {
          // No limit the client can know: many terminals at once all work, each on its own.
          const screens = Array.from({ length: 16 }, () => new Screen());
          for (const s of screens)
            opened.push(await pty.create({ cols: 80, rows: 24, onData: s.onData, command: "cat" }));
          await Promise.all(opened.map((h, i) => h.sendInput(`mark-${i}-end\r`)));
          await Promise.all(screens.map((s, i) => s.waitFor(new RegExp(`mark-${i}-end`))));
          for (const [i, s] of screens.entries())
            expect(s.text).not.toContain(`mark-${(i + 1) % 16}-end`);
          return;
        }
        const onData = () => undefined;
        let refused: unknown;
        for (let i = 0; i < 64 && !refused; i++) {
          await pty.create({ cols: 80, rows: 24, onData, command: "cat" }).then(
            (h) => opened.push(h),
            (err: unknown) => (refused = err),
          );
        }
        await expectSandboxError(Promise.reject(refused), "CAPACITY_EXCEEDED");
        expect(opened.length).toBeGreaterThan(1);
        // Killing one makes room again.
        await opened.pop()!.kill();
        opened.push(await pty.create({ cols: 80, rows: 24, onData, command: "cat" }));
      },
    );
  });
}
