"""Runs one code cell for sandboxd.

argv: <code file> <error file>. The code runs as __main__ under the filename "<code>", so
tracebacks show the user's lines but never a host path. An uncaught exception is written to the
error file as JSON {name, message, traceback} (sandboxd turns it into CodeExecutionResult.error),
printed to stderr as Python would, and the process exits 1.
"""
import json
import linecache
import sys
import traceback

FILENAME = "<code>"


def main() -> int:
    code_path, error_path = sys.argv[1], sys.argv[2]
    with open(code_path, encoding="utf-8") as f:
        source = f.read()
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
        with open(error_path, "w", encoding="utf-8") as f:
            json.dump({"name": type(exc).__name__, "message": str(exc), "traceback": text}, f)
        return 1
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(status)
