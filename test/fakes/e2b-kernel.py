"""A small stateful Python kernel for the E2B fake's code-interpreter contexts.

One process per context: cells run in one namespace, so variables, imports and functions
survive between cells. Requests arrive as JSON lines on the control channel (the process's
original stdin); events leave as the code interpreter's NDJSON lines on the original stdout:
stdout/stderr text as it is written (file descriptors 1 and 2 are captured, so subprocesses'
output counts too), results as MIME bundles under the interpreter's short keys (display calls,
matplotlib figures, then the last expression's value with is_main_result), an error with
name/value/traceback, then end_of_execution. SIGINT interrupts the running cell only
(KeyboardInterrupt), as a Jupyter interrupt does. The fake starts it as
`python3 -m ipykernel_launcher -f <connection file>` so it is found the way a real kernel is.
"""

import ast
import base64
import builtins
import codecs
import datetime
import json
import os
import sys
import threading
import traceback

_control = os.fdopen(os.dup(0), "r", encoding="utf-8")
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
_channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
_lock = threading.Lock()
_MARK = b"\0SYNC\0"


def _emit(obj):
    with _lock:
        _channel.write(json.dumps(obj) + "\n")
        _channel.flush()


class _Capture:
    """Reads what is written to one file descriptor and emits it; sync() drains it."""

    def __init__(self, fd, kind):
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        self.fd, self.r, self.kind = fd, r, kind
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.cv = threading.Condition()
        self.seen = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _send(self, b):
        text = self.decoder.decode(b)
        if text:
            # The code interpreter stamps every output message (the Python SDK requires it).
            stamp = datetime.datetime.now(datetime.timezone.utc).isoformat()
            _emit({"type": self.kind, "text": text, "timestamp": stamp})

    def _run(self):
        buf = b""
        while True:
            chunk = os.read(self.r, 65536)
            if not chunk:
                return
            buf += chunk
            while (i := buf.find(_MARK)) >= 0:
                self._send(buf[:i])
                buf = buf[i + len(_MARK):]
                with self.cv:
                    self.seen += 1
                    self.cv.notify_all()
            keep = max((k for k in range(len(_MARK)) if buf.endswith(_MARK[:k])), default=0)
            self._send(buf[: len(buf) - keep])
            buf = buf[len(buf) - keep:]

    def sync(self):
        with self.cv:
            want = self.seen + 1
            os.write(self.fd, _MARK)
            self.cv.wait_for(lambda: self.seen >= want, timeout=5)


_out = _Capture(1, "stdout")
_err = _Capture(2, "stderr")


def _drain():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    _out.sync()
    _err.sync()


# Jupyter MIME types under the code interpreter's result keys; others keep their MIME type.
_KEYS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}
_REPRS = {
    "text/html": "_repr_html_",
    "text/markdown": "_repr_markdown_",
    "image/svg+xml": "_repr_svg_",
    "image/png": "_repr_png_",
    "image/jpeg": "_repr_jpeg_",
    "application/pdf": "_repr_pdf_",
    "text/latex": "_repr_latex_",
    "application/json": "_repr_json_",
    "application/javascript": "_repr_javascript_",
}


def _bundle(obj):
    """The object's formats through IPython's display protocol (_repr_*_ methods)."""
    data = {}
    if not isinstance(obj, type):
        mb = getattr(obj, "_repr_mimebundle_", None)
        if callable(mb):
            r = mb()
            data.update((r[0] if isinstance(r, tuple) else r) or {})
        for mime, name in _REPRS.items():
            f = getattr(obj, name, None)
            if mime not in data and callable(f):
                v = f()
                v = v[0] if isinstance(v, tuple) else v
                if v is not None:
                    data[mime] = v
    data.setdefault("text/plain", repr(obj))
    out = {}
    for mime, v in data.items():
        if isinstance(v, (bytes, bytearray)):
            v = base64.b64encode(v).decode()
        out[_KEYS.get(mime, mime)] = v
    cls = type(obj)
    if cls.__name__ == "DataFrame" and cls.__module__.startswith("pandas"):
        out["data"] = json.loads(obj.to_json(orient="split", date_format="iso"))
    return out


def _result(obj, main):
    _drain()
    _emit({"type": "result", **_bundle(obj), "is_main_result": main})


def display(*objs, **_kwargs):
    for obj in objs:
        _result(obj, False)


builtins.display = display


def _figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        import io

        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        _drain()
        _emit(
            {
                "type": "result",
                "text": repr(fig),
                "png": base64.b64encode(buf.getvalue()).decode(),
                "is_main_result": False,
            }
        )
    plt.close("all")


_ns = {"__name__": "__main__", "__builtins__": builtins, "display": display}


def _run(code, n):
    name = f"<cell-{n}>"
    tree = ast.parse(code, name)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, name, "exec"), _ns)
    value = eval(compile(last, name, "eval"), _ns) if last is not None else None
    _figures()
    if value is not None:
        _ns["_"] = value
        _result(value, True)


def _error(e):
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    _drain()
    _emit(
        {
            "type": "error",
            "name": type(e).__name__,
            "value": str(e),
            "traceback": "".join(traceback.format_exception(type(e), e, tb)),
        }
    )


def main():
    os.environ.setdefault("MPLBACKEND", "Agg")
    n = 0
    while True:
        try:
            line = _control.readline()
        except KeyboardInterrupt:
            continue  # an interrupt between cells has nothing to stop
        if not line:
            return
        req = json.loads(line)
        n += 1
        saved = dict(os.environ)
        os.environ.update(req.get("env_vars") or {})
        try:
            _run(req["code"], n)
        except SystemExit as e:
            _drain()
            _emit({"type": "error", "name": "SystemExit", "value": str(e.code), "traceback": ""})
        except BaseException as e:  # KeyboardInterrupt included: the cell ends, the kernel lives
            _error(e)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        _drain()
        _emit({"type": "number_of_executions", "execution_count": n})
        _emit({"type": "end_of_execution"})


main()
