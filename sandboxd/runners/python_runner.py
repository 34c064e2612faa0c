"""Runs one code cell for sandboxd.

argv: <code file> <error file>. The code runs as __main__ under the filename "<code>", so
tracebacks show the user's lines but never a host path. An uncaught exception is written to the
error file as JSON {name, message, traceback} (sandboxd turns it into CodeExecutionResult.error),
printed to stderr as Python would, and the process exits 1.

argv: --spare <ms>. A spare runner (sandboxd/src/spare-runner.ts), started at <ms> (ms since
the epoch): the interpreter starts ahead of the cell and waits for one line on stdin, JSON
{source, error, cwd, env}: the code itself, the error file as above, and the cell's working
directory and whole environment, which replace the ones it started with. sandboxd hands it a
cell only when every variable read at interpreter start-up is the same. What start-up read from disk (the site
directories and every directory on sys.path) must not change under it:
- a directory changed after the view of it was taken (a package installed, a .pth file or
  sitecustomize written, the user site made);
- or changed shortly before the spare started, so perhaps while start-up read it (UNSURE_NS).
Then the cell must not run here: the runner writes {"stale": true} to the error file and exits
STALE_EXIT without running it; sandboxd then starts a fresh one.
"""
import json
import linecache
import os
import site
import sys
import traceback

FILENAME = "<code>"
STALE_EXIT = 75
# A change this close before the spare started may have raced start-up's reads (and a file
# system may keep mtimes to the second).
UNSURE_NS = 2_000_000_000


def main(code_path: str, error_path: str) -> int:
    with open(code_path, encoding="utf-8") as f:
        return run(f.read(), error_path)


def run(source: str, error_path: str) -> int:
    # Let tracebacks show source lines for the pseudo file name.
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
    sys.argv = [FILENAME]
    scope = {"__name__": "__main__", "__file__": FILENAME, "__builtins__": __builtins__}
    try:
        exec(compile(source, FILENAME, "exec"), scope)
    except SystemExit as exit_:
        code = exit_.code
        if code is None or code == 0:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the caller
        # Drop this runner's own frame so the traceback starts at the user's code.
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        sys.stdout.flush()
        sys.stderr.write(text)
        sys.stderr.flush()
        report = {"name": type(exc).__name__, "message": str(exc), "traceback": text}
        write_error(error_path, report)
        return 1
    return 0


def write_error(path: str, report: dict) -> None:
    # A spare's cell has no code file beside it: its directory may not be there yet.
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f)


def startup_view() -> list:
    """What interpreter start-up read from disk: each site and sys.path directory's mtime."""
    dirs = list(sys.path[1:])  # sys.path[0] is this runner's own directory
    try:
        dirs += site.getsitepackages()
        dirs.append(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    view = []
    for d in dirs:
        try:
            view.append((d, os.stat(d or ".").st_mtime_ns))
        except OSError:
            view.append((d, None))
    return view


def spare(spawned_ns: int) -> int:
    before = startup_view()
    unsure = any(m is not None and m >= spawned_ns - UNSURE_NS for _, m in before)
    line = sys.stdin.readline()
    if not line:
        return 0  # sandboxd let this spare go
    cell = json.loads(line)
    if unsure or startup_view() != before:
        write_error(cell["error"], {"stale": True})
        return STALE_EXIT
    os.chdir(cell["cwd"])
    os.environ.clear()
    os.environ.update(cell["env"])
    return run(cell["source"], cell["error"])


if __name__ == "__main__":
    if sys.argv[1] == "--spare":
        status = spare(int(sys.argv[2]) * 1_000_000)
    else:
        status = main(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(status)
