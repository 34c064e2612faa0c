"""Every AIO call DeerFlow makes, through the agent-sandbox client DeerFlow pins.

Each test names the AioSandbox method (bytedance/deer-flow,
backend/packages/harness/deerflow/community/aio_sandbox/aio_sandbox.py) whose call it makes, with
the same arguments, and checks what DeerFlow reads from the answer. Beyond those: a 20 MiB
upload, shell sessions that keep cwd, env and an activated venv, and async commands polled to
completion or killed, which agents rely on through the same client.
"""

import base64
import hashlib
import os
import time
import uuid

import httpx
import pytest
from agent_sandbox import Sandbox
from agent_sandbox.core.api_error import ApiError

# DeerFlow's virtual root: the workspace, uploads and outputs live under it.
USER_DATA = "/mnt/user-data"
# DeerFlow's AioSandbox passes these on every call that takes them.
NO_CHANGE_TIMEOUT = 600
HARD_TIMEOUT = 600.0


def shell(client: Sandbox, command: str, **kwargs):
    """AioSandbox.execute_command without env: shell.exec_command; DeerFlow reads data.output."""
    result = client.shell.exec_command(command=command, no_change_timeout=NO_CHANGE_TIMEOUT, **kwargs)
    assert result.success is not False, result
    assert result.data is not None, result
    return result.data


def write(client: Sandbox, path: str, content: str) -> None:
    """AioSandbox.write_file: file.write_file with utf-8 content."""
    client.file.write_file(file=path, content=content)


def read(client: Sandbox, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
    """AioSandbox.read_file: 1-based inclusive lines become start_line - 1 and end_line."""
    kwargs = {}
    if start_line is not None:
        kwargs["start_line"] = max(start_line - 1, 0)
    if end_line is not None:
        kwargs["end_line"] = max(end_line, 0)
    result = client.file.read_file(file=path, **kwargs)
    assert result.data is not None, result
    return result.data.content


def upload(client: Sandbox, path: str, content: bytes) -> None:
    """AioSandbox.update_file: the bytes base64-encoded in one write_file call."""
    encoded = base64.b64encode(content).decode("utf-8")
    client.file.write_file(file=path, content=encoded, encoding="base64")


def download(client: Sandbox, path: str) -> bytes:
    """AioSandbox.download_file: file.download_file's chunks, joined."""
    return b"".join(client.file.download_file(path=path))


# ---- discovery: readiness and the home directory ----


def test_readiness_probe(sandbox_url: str) -> None:
    """wait_for_sandbox_ready: GET /v1/sandbox answers 200."""
    with httpx.Client(timeout=5, trust_env=False) as http:
        assert http.get(f"{sandbox_url}/v1/sandbox").status_code == 200


def test_home_dir_from_context(client: Sandbox) -> None:
    """AioSandbox.home_dir: sandbox.get_context().home_dir, AIO's top-level shape."""
    context = client.sandbox.get_context()
    assert context.home_dir.startswith("/")
    assert isinstance(context.version, str) and context.version
    listed = shell(client, f"test -d {context.home_dir} && echo yes")
    assert listed.output.strip() == "yes"


# ---- commands ----


def test_execute_command(client: Sandbox) -> None:
    data = shell(client, "echo hello; echo oops >&2")
    assert data.status == "completed"
    assert data.exit_code == 0
    assert "hello" in data.output and "oops" in data.output


def test_execute_command_exit_code(client: Sandbox) -> None:
    data = shell(client, "sh -c 'exit 3'")
    assert data.status == "completed"
    assert data.exit_code == 3


def test_execute_command_with_env_is_scoped_to_the_call(client: Sandbox) -> None:
    """AioSandbox.execute_command(env=...): bash.exec with env, on a fresh session."""
    secret = f"s-{uuid.uuid4().hex}"
    result = client.bash.exec(
        command='printf %s "$DEER_SECRET"; printf err >&2',
        env={"DEER_SECRET": secret},
        hard_timeout=HARD_TIMEOUT,
    )
    assert result.data is not None, result
    assert result.data.stdout == secret
    assert result.data.stderr == "err"
    assert result.data.exit_code == 0
    # The secret never reaches later commands.
    assert shell(client, 'printf %s "${DEER_SECRET:-unset}"').output.strip() == "unset"


# ---- files: read, write, append, line ranges ----


def test_write_then_read(client: Sandbox, workdir: str) -> None:
    text = "héllo wörld\nsecond line\n"
    write(client, f"{workdir}/notes/a.md", text)
    assert read(client, f"{workdir}/notes/a.md") == text
    # What the file API wrote, the shell sees.
    assert shell(client, f"cat {workdir}/notes/a.md").output.strip() == text.strip()


def test_read_line_ranges(client: Sandbox, workdir: str) -> None:
    path = f"{workdir}/lines.txt"
    write(client, path, "".join(f"line{i}\n" for i in range(1, 11)))
    assert read(client, path, 3, 5).splitlines() == ["line3", "line4", "line5"]
    assert read(client, path, start_line=8).splitlines() == ["line8", "line9", "line10"]
    assert read(client, path, end_line=2).splitlines() == ["line1", "line2"]


def test_append(client: Sandbox, workdir: str) -> None:
    """AioSandbox.write_file(append=True): read the file, then write old + new."""
    path = f"{workdir}/log.txt"
    write(client, path, "one\n")
    existing = read(client, path)
    write(client, path, existing + "two\n")
    assert read(client, path) == "one\ntwo\n"
    # The client's own append flag, as agents use it.
    client.file.write_file(file=path, content="three\n", append=True)
    assert read(client, path) == "one\ntwo\nthree\n"


# ---- files: binary upload and download ----


def test_binary_upload_and_download(client: Sandbox, workdir: str) -> None:
    content = bytes(range(256)) * 64
    path = f"{USER_DATA}/uploads/{os.path.basename(workdir)}.bin"
    upload(client, path, content)
    assert download(client, path) == content


def test_upload_20_mib(client: Sandbox, workdir: str) -> None:
    content = os.urandom(20 * 1024 * 1024)
    path = f"{workdir}/big.bin"
    upload(client, path, content)
    digest = shell(client, f"sha256sum {path}").output.split()[0]
    assert digest == hashlib.sha256(content).hexdigest()
    assert download(client, path) == content


def test_missing_files_are_errors(client: Sandbox, workdir: str) -> None:
    """DeerFlow turns these ApiErrors into 'Error: ...' observations and OSError."""
    with pytest.raises(ApiError) as read_error:
        client.file.read_file(file=f"{workdir}/nothing.txt")
    assert read_error.value.status_code == 404
    with pytest.raises(ApiError) as download_error:
        download(client, f"{workdir}/nothing.bin")
    assert download_error.value.status_code == 404


def test_write_outside_user_data(client: Sandbox) -> None:
    """The file routes reach what the sandbox user can: write_file('/tmp/x.py') as the AIO image allows."""
    path = f"/tmp/deerflow-{uuid.uuid4().hex[:12]}.py"
    write(client, path, "print('from tmp')\n")
    assert shell(client, f"python3 {path}").output.strip() == "from tmp"
    assert read(client, path) == "print('from tmp')\n"


# ---- listing, glob, grep ----


def make_tree(client: Sandbox, root: str) -> None:
    write(client, f"{root}/a.py", "import os\nNEEDLE = 1\n")
    write(client, f"{root}/pkg/b.py", "def f():\n    return 'needle in b'\n")
    write(client, f"{root}/pkg/deep/c.txt", "no match here\nneedle.txt(\n")
    write(client, f"{root}/.hidden/d.py", "needle hidden\n")


def test_list_dir(client: Sandbox, workdir: str) -> None:
    """AioSandbox.list_dir: a find command through shell.exec_command, one path a line."""
    make_tree(client, workdir)
    data = shell(client, f"find {workdir} -maxdepth 2 -type f -o -type d 2>/dev/null | head -500")
    listed = {line.strip() for line in data.output.strip().split("\n") if line.strip()}
    assert {workdir, f"{workdir}/a.py", f"{workdir}/pkg", f"{workdir}/pkg/b.py", f"{workdir}/pkg/deep"} <= listed
    assert f"{workdir}/pkg/deep/c.txt" not in listed


def test_glob_files(client: Sandbox, workdir: str) -> None:
    """AioSandbox.glob without directories: file.find_files(path, glob)."""
    make_tree(client, workdir)
    result = client.file.find_files(path=workdir, glob="**/*.py")
    assert result.data is not None, result
    files = set(result.data.files or [])
    assert {f"{workdir}/a.py", f"{workdir}/pkg/b.py"} <= files
    assert f"{workdir}/pkg/deep/c.txt" not in files


def test_glob_with_directories(client: Sandbox, workdir: str) -> None:
    """AioSandbox.glob(include_dirs=True): file.list_path(recursive, no hidden entries)."""
    make_tree(client, workdir)
    result = client.file.list_path(path=workdir, recursive=True, show_hidden=False)
    assert result.data is not None, result
    entries = {entry.path: entry.is_directory for entry in result.data.files or []}
    assert entries.get(f"{workdir}/pkg") is True
    assert entries.get(f"{workdir}/pkg/deep") is True
    assert entries.get(f"{workdir}/pkg/deep/c.txt") is False
    assert entries.get(f"{workdir}/a.py") is False
    assert not any("/.hidden" in path for path in entries)


def test_grep(client: Sandbox, workdir: str) -> None:
    """AioSandbox.grep: file.grep_files with DeerFlow's arguments; FileGrepResult in full."""
    make_tree(client, workdir)
    result = client.file.grep_files(
        path=workdir,
        pattern="needle",
        case_insensitive=True,
        fixed_strings=False,
        max_results=450,
        max_file_size="1M",
        recursive=True,
    )
    assert result.data is not None, result
    assert result.data.pattern == "needle"
    assert result.data.path.rstrip("/") == workdir
    found = {(m.file, m.line_number, m.line_content) for m in result.data.matches or [] if "/.hidden/" not in m.file}
    assert found == {
        (f"{workdir}/a.py", 2, "NEEDLE = 1"),
        (f"{workdir}/pkg/b.py", 2, "    return 'needle in b'"),
        (f"{workdir}/pkg/deep/c.txt", 2, "needle.txt("),
    }
    assert not result.data.truncated


def test_grep_literal_and_case_sensitive(client: Sandbox, workdir: str) -> None:
    """grep(literal=True, case_sensitive=True): fixed_strings, case_insensitive=False."""
    make_tree(client, workdir)
    literal = client.file.grep_files(
        path=workdir,
        pattern="needle.txt(",
        case_insensitive=False,
        fixed_strings=True,
        max_results=450,
        max_file_size="1M",
        recursive=True,
    )
    assert literal.data is not None, literal
    assert [(m.file, m.line_number) for m in literal.data.matches or []] == [(f"{workdir}/pkg/deep/c.txt", 2)]
    exact = client.file.grep_files(
        path=workdir,
        pattern="NEEDLE",
        case_insensitive=False,
        fixed_strings=False,
        max_results=450,
        max_file_size="1M",
        recursive=True,
    )
    assert exact.data is not None, exact
    assert [m.file for m in exact.data.matches or []] == [f"{workdir}/a.py"]


# ---- shell sessions ----


def test_execute_command_calls_share_one_shell(client: Sandbox, workdir: str) -> None:
    """DeerFlow's bash tool sends no session id and relies on the AIO image's one persistent
    shell for those calls: a `cd` or an `export` holds for the agent's next command."""
    home = shell(client, "pwd").output.strip()
    try:
        shell(client, f"cd {workdir} && export DEER_FLOW_TOOL_VAR=kept")
        assert shell(client, "pwd").output.strip() == workdir
        assert shell(client, 'echo "$DEER_FLOW_TOOL_VAR"').output.strip() == "kept"
    finally:
        shell(client, f"cd {home} && unset DEER_FLOW_TOOL_VAR")


def test_shell_session_keeps_cwd_and_env(client: Sandbox, workdir: str) -> None:
    """Recovery in AioSandbox.execute_command: shell.create_session(id), exec with id, cleanup_session."""
    sid = str(uuid.uuid4())
    created = client.shell.create_session(id=sid)
    assert created.data is not None and created.data.session_id == sid, created
    try:
        assert shell(client, f"mkdir -p {workdir}/sub && cd {workdir}/sub", id=sid).session_id == sid
        assert shell(client, "pwd", id=sid).output.strip() == f"{workdir}/sub"
        shell(client, "export DEER_FLOW_VAR=kept", id=sid)
        assert shell(client, 'echo "$DEER_FLOW_VAR"', id=sid).output.strip() == "kept"
    finally:
        cleaned = client.shell.cleanup_session(sid)
    assert cleaned.success is True, cleaned


def test_shell_session_keeps_an_activated_venv(client: Sandbox, workdir: str) -> None:
    sid = str(uuid.uuid4())
    client.shell.create_session(id=sid)
    try:
        made = shell(client, f"cd {workdir} && python3 -m venv .venv", id=sid)
        assert made.exit_code == 0, made.output
        assert shell(client, "source .venv/bin/activate", id=sid).exit_code == 0
        assert shell(client, "which python", id=sid).output.strip() == f"{workdir}/.venv/bin/python"
        prefix = shell(client, 'python -c "import sys; print(sys.prefix)"', id=sid)
        assert prefix.output.strip() == f"{workdir}/.venv"
    finally:
        client.shell.cleanup_session(sid)


def test_shell_sessions_are_separate(client: Sandbox, workdir: str) -> None:
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    for sid in (first, second):
        client.shell.create_session(id=sid)
    try:
        shell(client, f"cd {workdir} && export ONLY_FIRST=1", id=first)
        assert shell(client, "pwd", id=first).output.strip() == workdir
        assert shell(client, 'echo "${ONLY_FIRST:-unset}"', id=second).output.strip() == "unset"
        assert shell(client, "pwd", id=second).output.strip() != workdir
    finally:
        for sid in (first, second):
            client.shell.cleanup_session(sid)


# ---- async commands ----


def poll(client: Sandbox, session_id: str, command_id: str, timeout_s: float = 60):
    """Polls bash.output from the returned offsets until the command leaves running; returns
    (stdout, stderr, final command info)."""
    stdout, stderr, offset, stderr_offset = "", "", 0, 0
    deadline = time.monotonic() + timeout_s
    while True:
        result = client.bash.output(
            session_id=session_id,
            command_id=command_id,
            offset=offset,
            stderr_offset=stderr_offset,
            wait=True,
            wait_timeout=2,
        )
        data = result.data
        assert data is not None, result
        stdout += data.stdout or ""
        stderr += data.stderr or ""
        offset = data.offset if data.offset is not None else offset
        stderr_offset = data.stderr_offset if data.stderr_offset is not None else stderr_offset
        if data.command is not None and data.command.status not in ("pending", "running"):
            return stdout, stderr, data.command
        assert time.monotonic() < deadline, f"still running after {timeout_s} s: {stdout!r}"


def test_async_command_polled_to_completion(client: Sandbox) -> None:
    started = client.bash.exec(
        command="for i in 1 2 3; do echo $i; sleep 1; done; echo done >&2",
        async_mode=True,
    )
    assert started.data is not None, started
    assert started.data.status in ("pending", "running")
    stdout, stderr, command = poll(client, started.data.session_id, started.data.command_id)
    assert command.status == "completed"
    assert command.exit_code == 0
    assert stdout == "1\n2\n3\n"
    assert stderr == "done\n"


def test_async_command_killed(client: Sandbox) -> None:
    started = client.bash.exec(command="sleep 300", async_mode=True)
    assert started.data is not None, started
    sid = started.data.session_id
    killed = client.bash.kill(session_id=sid, signal="SIGTERM")
    assert killed.success is True, killed
    _, _, command = poll(client, sid, started.data.command_id, timeout_s=30)
    assert command.status == "killed" or command.exit_code != 0, command
    # The session takes the next command.
    after = client.bash.exec(command="echo after", session_id=sid, hard_timeout=HARD_TIMEOUT)
    assert after.data is not None and after.data.stdout == "after\n", after


# ---- two sandboxes ----


def test_sandboxes_are_isolated(client: Sandbox, other_client: Sandbox, workdir: str) -> None:
    path = f"{workdir}/mine.txt"
    write(client, path, "first sandbox\n")
    with pytest.raises(ApiError) as error:
        other_client.file.read_file(file=path)
    assert error.value.status_code == 404
    assert "absent" == shell(other_client, f"test -e {workdir} && echo present || echo absent").output.strip()
