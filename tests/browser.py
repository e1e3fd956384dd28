"""Pages of the built site loaded in headless Chromium with the network off, and what a reader would see of them.

Chromium (Debian's `chromium` package; .ci/run installs it) is driven over the DevTools protocol on a pipe
(`--remote-debugging-pipe`: no port, no extra package). The site is served from 127.0.0.1, and every request for
anything else is failed and recorded (and the browser has no proxy or name resolution to reach it anyway), so a page
renders as it would in a lecture room without a network. After its scripts ran and MathJax typeset it, a page's
report has the scripts' errors (uncaught exceptions, console and network errors), MathJax's error nodes, and the
text a reader sees outside code, with every folded answer opened, so that raw TeX left in it can be found.
"""

import fcntl
import functools
import http.server
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: Where Chromium is looked for: $FLOWSIM_CHROMIUM, else Debian's and other distributions' names on the PATH.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")

#: TeX that MathJax would have typeset: a $...$ or \( \[ delimiter, or a command such as \frac or \mathbb.
RAW_TEX = re.compile(r"\$[^$\n]+\$|\\[(\[]|\\[A-Za-z]{2,}")

#: Runs the browser with the two pipe ends given as arguments on its descriptors 3 and 4.
_LAUNCH = (
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"
)

#: After the load event and MathJax's typesetting: the report of the page (run in the page, awaited).
_REPORT = """(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await document.fonts.ready;
  document.querySelectorAll("details").forEach((details) => { details.open = true; });
  const latex = [...document.querySelectorAll('[data-mime-type="text/latex"]')];
  const body = document.body.cloneNode(true);
  const hidden = "pre, code, script, style, textarea, mjx-container, .clipboard-copy-txt";
  body.querySelectorAll(hidden).forEach((node) => node.remove());
  return JSON.stringify({
    title: document.title,
    text: body.textContent,
    typeset: document.querySelectorAll("mjx-container").length,
    latex_outputs: latex.length,
    latex_outputs_typeset: latex.filter((output) => output.querySelector("mjx-container")).length,
    math_errors: [...document.querySelectorAll("mjx-merror")].map((node) => node.getAttribute("data-mjx-error")
      || node.textContent),
  });
})()"""


def find_chromium() -> str | None:
    """The Chromium executable, or None where none is installed."""
    if os.environ.get("FLOWSIM_CHROMIUM"):
        return os.environ["FLOWSIM_CHROMIUM"]
    return next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)


@dataclass(frozen=True)
class PageReport:
    """What one page showed: `errors`, the scripts' and the network's (each a line of text); `external`, the URLs
    it asked for outside the site; `title`, the tab's title; `text`, its visible text outside code and typeset
    math; `typeset`, the number of formulas MathJax typeset; `latex_outputs`, the number of a notebook's LaTeX
    outputs (SymPy's) and `latex_outputs_typeset`, how many of them hold a typeset formula; `math_errors`,
    MathJax's error messages."""

    url: str
    errors: tuple[str, ...]
    external: tuple[str, ...]
    title: str
    text: str
    typeset: int
    latex_outputs: int
    latex_outputs_typeset: int
    math_errors: tuple[str, ...]

    def raw_tex(self) -> list[str]:
        """Each piece of TeX left as text (in its context), in the title and the text."""
        found = []
        for text in (self.title, self.text):
            for match in RAW_TEX.finditer(text):
                found.append(" ".join(text[max(match.start() - 40, 0) : match.end() + 40].split()))
        return found


def _above_four(fd: int) -> int:
    duplicate = fcntl.fcntl(fd, fcntl.F_DUPFD, 5)
    os.close(fd)
    return duplicate


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """`folder` served over HTTP on 127.0.0.1 while the context lasts; yields its origin (http://127.0.0.1:port)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *arguments):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class Browser:
    """One headless Chromium, offline but for `origin`, loading pages one after another (`load`).

    **Arguments:** `executable`, Chromium's path; `origin`, the only origin the pages may load from; `timeout`, the
    seconds a page may take to load and typeset, and the browser to answer.
    """

    def __init__(self, executable: str, origin: str, timeout: float = 60.0):
        self.origin = origin
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="flowsim-chromium-")
        self._log = Path(self._profile.name) / "stderr.log"
        to_browser, self._send_fd = os.pipe()
        self._receive_fd, from_browser = os.pipe()
        # The browser's ends above 4, so that placing them on 3 and 4 (below) does not overwrite one with the other.
        to_browser, from_browser = (_above_four(fd) for fd in (to_browser, from_browser))
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            f"--user-data-dir={self._profile.name}/profile",
            # Nothing outside the machine can be reached: no name resolves but 127.0.0.1, and the only proxy
            # listens nowhere (loopback addresses bypass it).
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--proxy-server=http://127.0.0.1:9",
            "--remote-debugging-pipe",
            "--window-size=1280,900",
            "about:blank",
        ]
        # The protocol's pipe is the browser's file descriptors 3 (it reads) and 4 (it writes), placed there by a
        # Python launcher (a POSIX shell's redirections take single-digit descriptors only).
        self._process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCH, str(to_browser), str(from_browser), executable, *flags],
            pass_fds=(to_browser, from_browser),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self._log, "wb"),
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        # What the page being loaded reported (the events of setting up go to the first page's lists).
        self._errors: list[str] = []
        self._external: list[str] = []
        target = self._command("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._command("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self._command(method, {}, self._session)
        self._command("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, self._session)

    def close(self) -> None:
        try:
            self._command("Browser.close", {})
        except (OSError, RuntimeError):
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._send_fd)
        os.close(self._receive_fd)
        self._profile.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def load(self, url: str) -> PageReport:
        """Load `url`, wait for its load event and its typesetting, and report what it showed."""
        self._errors, self._external = [], []
        self._command("Page.navigate", {"url": url}, self._session)
        while self._handle(self._receive()) != "Page.loadEventFired":
            pass
        evaluate = {"expression": _REPORT, "awaitPromise": True, "returnByValue": True, "timeout": self.timeout * 1e3}
        result = self._command("Runtime.evaluate", evaluate, self._session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{url}: the report failed: {result['exceptionDetails']}")
        report = json.loads(result["result"]["value"])
        return PageReport(
            url,
            tuple(self._errors),
            tuple(self._external),
            report["title"],
            report["text"],
            report["typeset"],
            report["latex_outputs"],
            report["latex_outputs_typeset"],
            tuple(report["math_errors"]),
        )

    def _send(self, method: str, parameters: dict, session: str | None = None) -> int:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": parameters}
        if session is not None:
            message["sessionId"] = session
        os.write(self._send_fd, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _receive(self) -> dict:
        while b"\0" not in self._buffer:
            if not select.select([self._receive_fd], [], [], self.timeout)[0]:
                raise RuntimeError(f"Chromium sent nothing for {self.timeout} s")
            chunk = os.read(self._receive_fd, 1 << 20)
            if not chunk:
                log = self._log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"Chromium closed its DevTools pipe; it wrote:\n{log}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _command(self, method: str, parameters: dict, session: str | None = None) -> dict:
        """Send a command and return its result, handling the events that arrive meanwhile."""
        identifier = self._send(method, parameters, session)
        while True:
            message = self._receive()
            if message.get("id") == identifier:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self._handle(message)

    def _handle(self, message: dict) -> str | None:
        """Record an event (a request outside the site is failed here); returns its name (None for a reply)."""
        method, parameters = message.get("method"), message.get("params", {})
        if method == "Fetch.requestPaused":
            url, request = parameters["request"]["url"], {"requestId": parameters["requestId"]}
            if url.startswith(self.origin + "/"):
                self._send("Fetch.continueRequest", request, self._session)
            else:
                self._external.append(url)
                self._send("Fetch.failRequest", request | {"errorReason": "InternetDisconnected"}, self._session)
        elif method == "Runtime.exceptionThrown":
            details = parameters["exceptionDetails"]
            description = details.get("exception", {}).get("description") or details.get("text", "")
            self._errors.append(f"uncaught: {description.splitlines()[0] if description else details}")
        elif method == "Runtime.consoleAPICalled" and parameters["type"] in ("error", "assert"):
            values = [argument.get("value", argument.get("description", "")) for argument in parameters["args"]]
            self._errors.append(f"console.{parameters['type']}: {' '.join(map(str, values))}")
        elif method == "Log.entryAdded" and parameters["entry"]["level"] == "error":
            entry = parameters["entry"]
            self._errors.append(f"{entry['source']}: {entry['text']} {entry.get('url', '')}".strip())
        return method
