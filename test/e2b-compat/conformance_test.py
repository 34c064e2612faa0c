"""The E2B conformance suite, Python half: the official `e2b` and `e2b-code-interpreter` SDKs
(pinned in requirements.txt), used as E2B's published SDK reference describes them, against the
target in the environment (conftest.py). The sync API throughout, as most programs use it, and
the async API where it speaks a different wire form (the streamed directory watch).
The TypeScript half (conformance.ts) covers the same ground with the JS SDKs.
"""

import asyncio
import hashlib
import io
import os
import threading
import time
import uuid
from datetime import datetime, timezone

import httpx
import pytest
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    FileType,
    FilesystemEventType,
    NotFoundException,
    PtySize,
    RateLimitException,
    Sandbox,
    SandboxException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)
from e2b_code_interpreter import Sandbox as CodeInterpreter

HOME = "/home/user"
MIB = 1024 * 1024
RICH = ["pandas==3.1.1", "matplotlib==3.11.2"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def until(what: str, seconds: float, check) -> None:
    """Polls check() every 0.5 s until it is true, for at most `seconds`."""
    end = time.monotonic() + seconds
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.5)


def pattern(size: int, seed: str) -> bytes:
    """Deterministic bytes: SHA-256 in counter mode over the seed, 1 MiB blocks repeated."""
    block = b"".join(
        hashlib.sha256(f"{seed}:{i}".encode()).digest() for i in range(MIB // 32)
    )
    return (block * (size // MIB + 1))[:size]


# ---- lifecycle ----------------------------------------------------------------------------


def test_create_reports_info(made, run_id):
    sbx = Sandbox.create(timeout=600, metadata={"suite": run_id, "case": "info"})
    made.append(sbx)
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.metadata == {"suite": run_id, "case": "info"}
    assert info.state == SandboxState.RUNNING
    assert info.end_at > info.started_at
    assert sbx.is_running()


def test_connect_by_id_sees_files(sbx):
    sbx.files.write(f"{HOME}/mark.txt", "here")
    again = Sandbox.connect(sbx.sandbox_id)
    assert again.sandbox_id == sbx.sandbox_id
    assert again.files.read(f"{HOME}/mark.txt") == "here"


def test_list_by_metadata_in_pages(made, run_id):
    tag = f"list-{run_id}"
    for n in ("1", "2", "3"):
        made.append(Sandbox.create(timeout=600, metadata={"tag": tag, "n": n}))
    ids = sorted(s.sandbox_id for s in made)
    everything = Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()
    assert sorted(s.sandbox_id for s in everything) == ids
    one = Sandbox.list(query=SandboxQuery(metadata={"tag": tag, "n": "2"})).next_items()
    assert [s.sandbox_id for s in one] == [made[1].sandbox_id]
    assert one[0].metadata == {"tag": tag, "n": "2"}

    pages = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=2)
    first = pages.next_items()
    assert len(first) == 2 and pages.has_next
    second = pages.next_items()
    assert len(second) == 1 and not pages.has_next
    assert sorted(s.sandbox_id for s in first + second) == ids


def test_set_timeout_moves_end_and_expires(sbx):
    sbx.set_timeout(120)
    later = sbx.get_info().end_at
    assert abs((later - datetime.now(timezone.utc)).total_seconds() - 120) < 30
    sbx.set_timeout(3)
    assert (later - sbx.get_info().end_at).total_seconds() > 60
    until("the sandbox to expire", 120, lambda: not sbx.is_running())
    assert sbx.sandbox_id not in [s.sandbox_id for s in Sandbox.list().next_items()]
    with pytest.raises(NotFoundException):
        Sandbox.connect(sbx.sandbox_id)


def test_pause_and_resume_keep_files(need, made, run_id):
    need("pause")
    sbx = Sandbox.create(timeout=600, metadata={"tag": f"pause-{run_id}"})
    made.append(sbx)
    sbx.files.write(f"{HOME}/kept.txt", "kept across pause")
    assert sbx.pause() is True
    assert sbx.get_info().state == SandboxState.PAUSED
    paused = Sandbox.list(
        query=SandboxQuery(metadata={"tag": f"pause-{run_id}"}, state=[SandboxState.PAUSED])
    ).next_items()
    assert [s.sandbox_id for s in paused] == [sbx.sandbox_id]
    assert Sandbox.pause(sbx.sandbox_id) is False

    back = Sandbox.connect(sbx.sandbox_id, timeout=600)
    assert back.get_info().state == SandboxState.RUNNING
    assert back.files.read(f"{HOME}/kept.txt") == "kept across pause"
    assert back.commands.run("echo alive").stdout == "alive\n"


def test_auto_pause_on_timeout(need, made):
    need("pause")
    sbx = Sandbox.create(timeout=4, lifecycle={"on_timeout": "pause"})
    made.append(sbx)
    sbx.files.write(f"{HOME}/auto.txt", "auto")
    until("the sandbox to auto-pause", 120, lambda: sbx.get_info().state == SandboxState.PAUSED)
    back = Sandbox.connect(sbx.sandbox_id, timeout=600)
    assert back.files.read(f"{HOME}/auto.txt") == "auto"


def test_kill(made, run_id):
    sbx = Sandbox.create(timeout=600, metadata={"tag": f"kill-{run_id}"})
    made.append(sbx)
    bg = sbx.commands.run("sleep 600", background=True)
    assert sbx.kill() is True
    # Killing a sandbox ends its streams: waiting on a command of it does not hang.
    with pytest.raises(Exception):
        bg.wait()
    assert not sbx.is_running()
    listed = Sandbox.list(query=SandboxQuery(metadata={"tag": f"kill-{run_id}"})).next_items()
    assert listed == []
    assert Sandbox.kill(sbx.sandbox_id) is False


# ---- commands -----------------------------------------------------------------------------


def test_foreground_command(sbx):
    r = sbx.commands.run("echo out; echo err >&2")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 0)


def test_non_zero_exit_raises(sbx):
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo bad >&2; exit 3")
    assert e.value.exit_code == 3
    assert e.value.stderr == "bad\n"


def test_envs_merge(sbx):
    r = sbx.commands.run(
        'echo "$FROM_CREATE $OVERRIDDEN $ONLY_HERE"',
        envs={"OVERRIDDEN": "command", "ONLY_HERE": "yes"},
    )
    assert r.stdout == "sandbox-wide command yes\n"


def test_cwd(sbx):
    assert sbx.commands.run("pwd").stdout == f"{HOME}\n"
    sbx.files.make_dir(f"{HOME}/wd")
    assert sbx.commands.run("pwd", cwd=f"{HOME}/wd").stdout == f"{HOME}/wd\n"


def test_streams_while_running(sbx):
    go = f"{HOME}/go-{uuid.uuid4().hex}"
    seen = []

    def on_stdout(line: str) -> None:
        seen.append(line)
        if "first" in line:
            sbx.files.write(go, "")

    # The command waits for a file the callback writes: it can only finish if the first line
    # reached us while it was still running.
    r = sbx.commands.run(
        f"echo first; for i in $(seq 1 300); do [ -e {go} ] && break; sleep 0.1; done; "
        f"[ -e {go} ] && echo second",
        on_stdout=on_stdout,
    )
    assert r.stdout == "first\nsecond\n"
    assert "".join(seen) == "first\nsecond\n"


def test_background_handle(sbx):
    h = sbx.commands.run("sleep 0.5; echo done", background=True)
    assert h.pid > 0
    assert h.pid in [p.pid for p in sbx.commands.list()]
    r = h.wait()
    assert (r.exit_code, r.stdout) == (0, "done\n")


def test_connect_to_background_command(sbx):
    go = f"{HOME}/go-{uuid.uuid4().hex}"
    h = sbx.commands.run(
        f"for i in $(seq 1 300); do [ -e {go} ] && break; sleep 0.1; done; echo after",
        background=True,
    )
    again = sbx.commands.connect(h.pid)
    sbx.files.write(go, "")
    r = again.wait()
    assert (r.exit_code, r.stdout) == (0, "after\n")


def test_stdin(sbx):
    h = sbx.commands.run("cat; echo end", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "hello\n")
    sbx.commands.send_stdin(h.pid, b"bytes\n")
    sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "hello\nbytes\nend\n"


def test_kill_background_commands(sbx):
    a = sbx.commands.run("sleep 600", background=True)
    assert a.kill() is True
    with pytest.raises(CommandExitException):
        a.wait()
    b = sbx.commands.run("sleep 600", background=True)
    assert sbx.commands.kill(b.pid) is True
    with pytest.raises(CommandExitException):
        b.wait()
    pids = [p.pid for p in sbx.commands.list()]
    assert a.pid not in pids and b.pid not in pids
    assert sbx.commands.kill(b.pid) is False


# ---- pty ----------------------------------------------------------------------------------


def _reader(handle, out: bytearray, outcome: dict) -> threading.Thread:
    def read():
        try:
            outcome["result"] = handle.wait(on_pty=out.extend)
        except Exception as e:  # the test asserts what ended it
            outcome["error"] = e

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def test_pty_input_resize_exit(sbx):
    out, outcome = bytearray(), {}
    term = sbx.pty.create(PtySize(rows=24, cols=80))
    reader = _reader(term, out, outcome)
    sbx.pty.send_stdin(term.pid, b"echo $((6 * 7))\n")
    until("the echo", 30, lambda: b"42" in out)
    sbx.pty.resize(term.pid, PtySize(rows=33, cols=101))
    sbx.pty.send_stdin(term.pid, b"stty size\n")
    until("stty size", 30, lambda: b"33 101" in out)
    sbx.pty.send_stdin(term.pid, b"exit 7\n")
    reader.join(30)
    assert isinstance(outcome.get("error"), CommandExitException)
    assert outcome["error"].exit_code == 7


def test_pty_clean_exit_and_kill(sbx):
    out, outcome = bytearray(), {}
    a = sbx.pty.create(PtySize(rows=24, cols=80))
    reader = _reader(a, out, outcome)
    sbx.pty.send_stdin(a.pid, b"exit\n")
    reader.join(30)
    assert outcome["result"].exit_code == 0
    b = sbx.pty.create(PtySize(rows=24, cols=80))
    assert sbx.pty.kill(b.pid) is True
    with pytest.raises(CommandExitException):
        b.wait()


# ---- files --------------------------------------------------------------------------------


def test_text_and_bytes(sbx):
    sbx.files.write(f"{HOME}/t/hello.txt", "héllo\n")
    assert sbx.files.read(f"{HOME}/t/hello.txt") == "héllo\n"
    data = bytes(range(256))
    sbx.files.write(f"{HOME}/t/all.bin", data)
    assert bytes(sbx.files.read(f"{HOME}/t/all.bin", format="bytes")) == data


def test_list_with_depth(sbx):
    sbx.files.write(f"{HOME}/tree/a/b/c.txt", "deep")
    sbx.files.write(f"{HOME}/tree/top.txt", "top")
    one = sbx.files.list(f"{HOME}/tree")
    assert sorted((e.name, e.type) for e in one) == [("a", FileType.DIR), ("top.txt", FileType.FILE)]
    every = sbx.files.list(f"{HOME}/tree", depth=3)
    assert sorted(e.path for e in every) == [
        f"{HOME}/tree/{p}" for p in ("a", "a/b", "a/b/c.txt", "top.txt")
    ]


def test_exists_and_missing(sbx):
    sbx.files.write(f"{HOME}/there.txt", "x")
    assert sbx.files.exists(f"{HOME}/there.txt")
    assert not sbx.files.exists(f"{HOME}/not-there.txt")
    with pytest.raises(NotFoundException):
        sbx.files.read(f"{HOME}/not-there.txt")


def test_rename_remove_make_dir(sbx):
    sbx.files.write(f"{HOME}/old.txt", "moved")
    moved = sbx.files.rename(f"{HOME}/old.txt", f"{HOME}/new.txt")
    assert moved.path == f"{HOME}/new.txt"
    assert not sbx.files.exists(f"{HOME}/old.txt")
    assert sbx.files.read(f"{HOME}/new.txt") == "moved"
    sbx.files.remove(f"{HOME}/new.txt")
    assert not sbx.files.exists(f"{HOME}/new.txt")
    assert sbx.files.make_dir(f"{HOME}/made/deep") is True
    assert sbx.files.make_dir(f"{HOME}/made/deep") is False
    assert sbx.files.get_info(f"{HOME}/made/deep").type == FileType.DIR


def test_info(sbx):
    sbx.files.write(f"{HOME}/info.txt", "12345")
    sbx.commands.run(f"chmod 640 {HOME}/info.txt")
    info = sbx.files.get_info(f"{HOME}/info.txt")
    assert (info.name, info.path, info.type, info.size) == (
        "info.txt",
        f"{HOME}/info.txt",
        FileType.FILE,
        5,
    )
    assert (info.mode, info.permissions) == (0o640, "-rw-r-----")
    assert abs((info.modified_time - datetime.now(timezone.utc)).total_seconds()) < 600
    with pytest.raises(NotFoundException):
        sbx.files.get_info(f"{HOME}/nope")


def _touch_edit_remove(sbx, directory: str) -> None:
    sbx.files.write(f"{directory}/w.txt", "1")
    sbx.commands.run(f"echo more >> {directory}/w.txt")
    sbx.files.remove(f"{directory}/w.txt")


def test_watch_polled(sbx, run_id, need):
    """The sync SDK's watcher: envd's CreateWatcher / GetWatcherEvents / RemoveWatcher."""
    need("polledWatchWrites")
    directory = f"{HOME}/watched-{run_id}"
    sbx.files.make_dir(directory)
    handle = sbx.files.watch_dir(directory)
    events = []
    try:
        _touch_edit_remove(sbx, directory)

        def removed():
            events.extend(handle.get_new_events())
            return any(e.type == FilesystemEventType.REMOVE and e.name == "w.txt" for e in events)

        until("a remove event", 30, removed)
    finally:
        handle.stop()
    kinds = {e.type for e in events if e.name == "w.txt"}
    assert FilesystemEventType.CREATE in kinds and FilesystemEventType.WRITE in kinds


def test_watch_streamed(sbx, run_id):
    """The async SDK's watcher: envd's streamed WatchDir."""
    directory = f"{HOME}/watched-async-{run_id}"
    sbx.files.make_dir(directory)

    async def watch():
        asbx = await AsyncSandbox.connect(sbx.sandbox_id)
        events = []
        handle = await asbx.files.watch_dir(directory, on_event=events.append)
        try:
            await asyncio.to_thread(_touch_edit_remove, sbx, directory)
            end = time.monotonic() + 30
            while not any(e.type == FilesystemEventType.REMOVE for e in events):
                assert time.monotonic() < end, f"no remove event in 30 s: {events}"
                await asyncio.sleep(0.2)
        finally:
            await handle.stop()
        return events

    events = asyncio.run(watch())
    kinds = {e.type for e in events if e.name == "w.txt"}
    assert FilesystemEventType.CREATE in kinds and FilesystemEventType.WRITE in kinds


def test_upload_download_100_mib(sbx, run_id):
    data = pattern(100 * MIB, run_id)
    path = f"{HOME}/big.bin"
    sbx.files.write(path, io.BytesIO(data))
    assert sbx.files.get_info(path).size == len(data)
    digest, got = hashlib.sha256(), 0
    for chunk in sbx.files.read(path, format="stream"):
        digest.update(chunk)
        got += len(chunk)
    assert got == len(data)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    sbx.files.remove(path)


def test_signed_urls(sbx):
    path = f"{HOME}/signed.bin"
    data = os.urandom(MIB + 17)
    up = sbx.upload_url(path)
    assert httpx.URL(up).params.get("signature", "").startswith("v1_")
    with httpx.Client(timeout=120, trust_env=False) as http:
        put = http.post(up, files={"file": ("signed.bin", data)})
        assert put.status_code == 200, put.text
        down = http.get(sbx.download_url(path, use_signature_expiration=60))
        assert down.status_code == 200
        assert down.content == data
        # A signature for another path does not open this one.
        forged = httpx.URL(sbx.download_url(f"{HOME}/other.bin")).copy_set_param("path", path)
        assert http.get(forged).status_code >= 400


# ---- code interpreter ---------------------------------------------------------------------


@pytest.fixture
def ci(made) -> CodeInterpreter:
    s = CodeInterpreter.create(timeout=600)
    made.append(s)
    return s


def test_state_across_cells(ci):
    ci.run_code("x = 41")
    r = ci.run_code("x + 1")
    assert r.error is None
    assert r.text == "42"
    assert r.results[0].is_main_result


def test_context_getcwd(ci, need):
    need("homeCwd")
    ci.files.make_dir(f"{HOME}/ctx-cwd")
    a = ci.create_code_context(cwd=f"{HOME}/ctx-cwd", language="python")
    assert ci.run_code("import os; os.getcwd()", context=a).text == f"'{HOME}/ctx-cwd'"


def test_contexts(ci):
    ci.files.make_dir(f"{HOME}/ctx")
    a = ci.create_code_context(cwd=f"{HOME}/ctx", language="python")
    b = ci.create_code_context(language="python")
    assert a.cwd == f"{HOME}/ctx"
    ci.run_code("only_in_a = 1", context=a)
    assert ci.run_code("only_in_a", context=b).error.name == "NameError"
    assert {a.id, b.id} <= {c.id for c in ci.list_code_contexts()}
    ci.restart_code_context(a)
    assert ci.run_code("only_in_a", context=a).error.name == "NameError"
    ci.remove_code_context(b)
    assert b.id not in {c.id for c in ci.list_code_contexts()}
    with pytest.raises(SandboxException):
        ci.run_code("1", context=b)


def test_streaming_callbacks(ci):
    go = f"{HOME}/go-{uuid.uuid4().hex}"
    out, err, results = [], [], []

    def on_stdout(m):
        out.append(m.line)
        if "early" in m.line:
            ci.files.write(go, "")

    r = ci.run_code(
        "\n".join(
            [
                "import os, sys, time",
                "print('early', flush=True)",
                "print('warn', file=sys.stderr, flush=True)",
                f"for _ in range(300):\n    if os.path.exists('{go}'): break\n    time.sleep(0.1)",
                f"print('late' if os.path.exists('{go}') else 'never released')",
                "6 * 7",
            ]
        ),
        on_stdout=on_stdout,
        on_stderr=lambda m: err.append(m.line),
        on_result=lambda res: results.append(res.text),
    )
    assert "".join(out) == "early\nlate\n"
    assert "".join(err) == "warn\n"
    assert results == ["42"]
    assert "".join(r.logs.stdout) == "early\nlate\n"


def test_errors_with_traceback(ci):
    errors = []
    r = ci.run_code(
        "def fail():\n    raise ValueError('boom')\nfail()",
        on_error=lambda e: errors.append(e.name),
    )
    assert (r.error.name, r.error.value) == ("ValueError", "boom")
    assert "ValueError" in r.error.traceback and "fail" in r.error.traceback
    assert errors == ["ValueError"]
    assert ci.run_code("1 + 1").text == "2"


def test_javascript_and_typescript_contexts(ci):
    for language in ("javascript", "typescript"):
        context = ci.create_code_context(language=language)
        ci.run_code("const base = 20;", context=context)
        r = ci.run_code("base * 2 + 2", context=context)
        assert r.error is None and r.text == "42", language


def test_javascript_and_typescript_by_language(need, ci):
    need("jsDefaultContexts")
    js = ci.run_code("const a = 20; a * 2 + 2", language="javascript")
    assert js.error is None and js.text == "42"
    ts = ci.run_code("const n: number = 6; n * 7", language="typescript")
    assert ts.error is None and ts.text == "42"


def test_bash_cells(need, ci):
    need("bashCells")
    r = ci.run_code("echo $((40 + 2))", language="bash")
    assert r.error is None
    assert "".join(r.logs.stdout) == "42\n"


def test_dataframe_and_chart(need, lacks, ci):
    if "richLibrariesPreinstalled" in lacks:
        need("packageIndex")
        pip = ci.commands.run(f"pip install --user --quiet {' '.join(RICH)}", timeout=540)
        assert pip.exit_code == 0
    # A context started now sees packages installed just before.
    context = ci.create_code_context(language="python")
    df = ci.run_code(
        "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\ndf",
        context=context,
        timeout=120,
    )
    assert df.error is None
    table = next(r for r in df.results if r.is_main_result)
    assert "<table" in table.html
    assert "a  b" in table.text
    assert table.data and "a" in str(table.data) and "b" in str(table.data)

    chart = ci.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title('t')\nplt.show()",
        context=context,
        timeout=120,
    )
    assert chart.error is None
    png = next(r for r in chart.results if r.png)
    import base64

    assert base64.b64decode(png.png)[:8] == PNG_SIGNATURE


# ---- errors -------------------------------------------------------------------------------


def test_bad_key():
    bad = "e2b_" + "f" * 40
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key=bad)
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key=bad).next_items()


def test_unknown_template(run_id):
    # E2B answers 404; the SDK maps no status to a class of its own on create.
    with pytest.raises(SandboxException, match=r"^404\b"):
        Sandbox.create(f"no-such-template-{run_id}")


def test_unknown_sandbox(run_id):
    sid = f"nosuch{run_id}"
    with pytest.raises(NotFoundException):
        Sandbox.connect(sid)
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sid)
    assert Sandbox.kill(sid) is False


def test_quota(need, quota):
    need("quota")
    key, most = quota
    held = []
    try:
        for _ in range(most):
            held.append(Sandbox.create(api_key=key, timeout=300))
        with pytest.raises(RateLimitException):
            held.append(Sandbox.create(api_key=key, timeout=300))
    finally:
        for s in held:
            s.kill()


def test_command_timeout(sbx, run_id):
    marker = f"{HOME}/late-{run_id}"
    with pytest.raises(TimeoutException):
        sbx.commands.run(f"sleep 5; touch {marker}", timeout=1)
    time.sleep(6)
    assert not sbx.files.exists(marker)


def test_cell_timeout(ci):
    with pytest.raises(TimeoutException):
        ci.run_code("import time; time.sleep(30)", timeout=1)


def test_killed_sandbox_data_plane(sbx):
    Sandbox.kill(sbx.sandbox_id)
    # E2B's edge answers 502 for a sandbox that is gone; the SDK raises its not-running errors.
    with pytest.raises((NotFoundException, TimeoutException)):
        sbx.commands.run("true")
    with pytest.raises((NotFoundException, TimeoutException)):
        sbx.files.read(f"{HOME}/x")
