"""A persistent Python interpreter for one sandboxd code context.

Cells arrive as JSON lines on fd 3 and run one after another in one namespace; what they produce
goes back as JSON lines on fd 4 (`result`, `error`, then `done`). Those two descriptors are the
kernel's private channel: a cell's prints go to fds 1 and 2, which sandboxd streams as they come,
so nothing a cell prints can be mistaken for the protocol. Before `done`, the kernel writes the
cell's random end mark to fds 1 and 2, so sandboxd knows it has all of the cell's output.

Like IPython, a cell's statements run in order and, if the last one is an expression, its value
is the cell's main result. `display(obj)` (a builtin here) adds a result at once. A result is the
object's formats from its `_repr_*_` methods; a pandas DataFrame also gets a table form;
matplotlib draws with Agg and each figure still open at the end of a cell (or shown with
`plt.show()`) becomes a PNG result and is closed. SIGINT interrupts the running cell
(KeyboardInterrupt) and is ignored between cells.
"""
import ast
import base64
import builtins
import io
import json
import linecache
import os
import signal
import sys
import traceback
import types

REQUESTS, EVENTS = 3, 4
KERNEL_FILE = os.path.abspath(__file__)
# A table keeps this many rows of a DataFrame (its HTML form is pandas' own, truncated as pandas does).
MAX_TABLE_ROWS = 1000
FORMATS = [
    ("html", "_repr_html_"),
    ("markdown", "_repr_markdown_"),
    ("svg", "_repr_svg_"),
    ("png", "_repr_png_"),
    ("jpeg", "_repr_jpeg_"),
    ("latex", "_repr_latex_"),
    ("json", "_repr_json_"),
    ("javascript", "_repr_javascript_"),
]
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}

for fd in (REQUESTS, EVENTS):
    os.set_inheritable(fd, False)  # commands a cell starts must not hold the channel
events = os.fdopen(EVENTS, "w", encoding="utf-8", buffering=1)
requests = os.fdopen(REQUESTS, "r", encoding="utf-8")
in_cell = False


def send(event):
    events.write(json.dumps(event, default=str) + "\n")
    events.flush()


def on_sigint(_signum, _frame):
    if in_cell:
        raise KeyboardInterrupt
    # Between cells there is nothing to interrupt.


def as_text(value):
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def bundle(obj):
    """The formats of `obj` as a CodeResult (without isMainResult)."""
    out = {}
    if not isinstance(obj, type):
        mimebundle = getattr(obj, "_repr_mimebundle_", None)
        if callable(mimebundle):
            try:
                data = mimebundle()
                if isinstance(data, tuple):
                    data = data[0]
                for mime, value in (data or {}).items():
                    field = MIME_FIELDS.get(mime)
                    if field:
                        out[field] = as_text(value)
                    else:
                        out.setdefault("extra", {})[mime] = as_text(value)
            except Exception:  # noqa: BLE001 - a broken repr leaves the other formats
                pass
        for field, name in FORMATS:
            method = getattr(obj, name, None)
            if field in out or not callable(method):
                continue
            try:
                value = method()
            except Exception:  # noqa: BLE001
                continue
            if isinstance(value, tuple):
                value = value[0]
            if value is not None:
                out[field] = as_text(value)
        table = dataframe_table(obj)
        if table:
            out["table"] = table
    if "text" not in out:
        try:
            out["text"] = repr(obj)
        except Exception as exc:  # noqa: BLE001
            out["text"] = f"<repr failed: {type(exc).__name__}: {exc}>"
    return out


def dataframe_table(obj):
    cls = type(obj)
    if cls.__name__ != "DataFrame" or not cls.__module__.startswith("pandas"):
        return None
    try:
        split = json.loads(
            obj.head(MAX_TABLE_ROWS).to_json(orient="split", date_format="iso", default_handler=str)
        )
        return {"columns": [str(c) for c in obj.columns], "rows": split["data"]}
    except Exception:  # noqa: BLE001 - the table is a convenience beside the HTML
        return None


def display(*objs):
    """Shows each object as a result of the running cell, as IPython's display() does."""
    for obj in objs:
        send({"type": "result", "result": {"isMainResult": False, **bundle(obj)}})


def flush_figures():
    """Every open matplotlib figure becomes a PNG result, then is closed."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        try:
            fig.savefig(buf, format="png", bbox_inches="tight")
            png = base64.b64encode(buf.getvalue()).decode("ascii")
            send({"type": "result", "result": {"isMainResult": False, "text": repr(fig), "png": png}})
        finally:
            plt.close(fig)


def inline_backend():
    """A matplotlib backend (`module://sandpit_inline`): Agg canvases, and show() as a result."""
    mod = types.ModuleType("sandpit_inline")

    def lazy(name):
        if name not in ("FigureCanvas", "FigureManager"):
            raise AttributeError(name)
        # matplotlib imports this module only once it is itself loaded.
        from matplotlib.backend_bases import FigureManagerBase
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        mod.FigureCanvas = FigureCanvasAgg
        mod.FigureManager = FigureManagerBase
        return getattr(mod, name)

    mod.__getattr__ = lazy
    mod.show = lambda *args, **kwargs: flush_figures()
    return mod


def error_event(exc):
    # Frames of this kernel are left out: the traceback starts at the user's code.
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == KERNEL_FILE:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return {"type": "error", "error": {"name": type(exc).__name__, "value": str(exc), "traceback": text}}


def run_cell(number, source, scope):
    global in_cell
    filename = f"<cell {number}>"
    # Tracebacks, now and from functions defined here later, show this cell's lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(source, filename, "exec", flags | ast.PyCF_ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec", flags)
    value_code = compile(last, filename, "eval", flags) if last else None
    in_cell = True
    try:
        run(body, scope)
        value = run(value_code, scope) if value_code else None
    finally:
        in_cell = False
    flush_figures()
    if value is not None:
        send({"type": "result", "result": {"isMainResult": True, **bundle(value)}})


def run(code, scope):
    result = eval(code, scope)  # noqa: S307 - running the user's code is the point
    if code.co_flags & 0x80:  # CO_COROUTINE: the cell awaits at top level
        import asyncio

        loop = asyncio.get_event_loop_policy().get_event_loop()
        result = loop.run_until_complete(result)
    return result


def main():
    signal.signal(signal.SIGINT, on_sigint)
    sys.modules["sandpit_inline"] = inline_backend()
    os.environ["MPLBACKEND"] = "module://sandpit_inline"
    builtins.display = display
    sys.argv = [""]
    scope = {"__name__": "__main__", "__builtins__": builtins}
    send({"type": "ready"})
    number = 0
    for line in requests:
        request = json.loads(line)
        number += 1
        saved = {k: os.environ.get(k) for k in request.get("env") or {}}
        os.environ.update(request.get("env") or {})
        try:
            run_cell(number, request["code"], scope)
        except BaseException as exc:  # noqa: BLE001 - every failure of a cell is its result
            try:
                flush_figures()
            except Exception:  # noqa: BLE001
                pass
            send(error_event(exc))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            mark = request["mark"].encode()
            for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - a cell may have replaced or closed it
                    pass
                os.write(fd, mark)
            send({"type": "done"})


if __name__ == "__main__":
    main()
