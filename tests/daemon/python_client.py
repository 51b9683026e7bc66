"""Scenarios of the Python client (python/nxcc), each run by tests/daemon/python.rs as
`python3 tests/daemon/python_client.py SCENARIO` with PYTHONPATH=python: against the daemon the
Rust test started (its socket in NXCC_DAEMON_SOCKET, a working directory holding m.hlo in
NXCC_TEST_WD), or against stand-in servers made here. A scenario that fails raises (exit 1, with
its traceback); one that passes prints `ok SCENARIO`."""

import os
import signal
import socket
import shutil
import sys
import tempfile
import threading
import time

import nxcc

WD = os.environ.get("NXCC_TEST_WD", "")
GUARD_S = float(os.environ.get("NXCC_TEST_HANG_GUARD_S", "90"))
SIM = ["--target", "trn2", "--toolchain", "sim"]


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def wait_until(what, f):
    """Wait for an event (never a fixed sleep): `f()` true, or fail after the guard."""
    deadline = time.monotonic() + GUARD_S
    while not f():
        check(time.monotonic() < deadline, "timed out waiting for " + what)
        time.sleep(0.01)


def raises(kind, f):
    try:
        f()
    except kind as e:
        return e
    raise AssertionError("%s was not raised" % kind.__name__)


def refused(connect):
    """Whether `connect()` finds no daemon."""
    try:
        connect().close()
    except nxcc.DaemonUnavailable:
        return True
    return False


def compile_hit_failure_status_explain():
    with nxcc.connect() as c:
        first = c.compile(["m.hlo", "--output", "a.neff"] + SIM, cwd=WD)
        check(first.ok and first.exit_status == 0, repr(first))
        check(first.cache == "miss", first.cache)
        check(first.neff == os.path.join(WD, "a.neff") and os.path.isfile(first.neff), first.neff)
        check(first.failure is None and first.lines == [], repr(first.lines))
        check(any("Compiler status PASS" in t for _, t in first.console), repr(first.console))
        conn = c._conn
        # The same compile again: a hit, on the same connection.
        seen = []
        hit = c.compile(
            ["compile", "m.hlo", "--output", "b.neff"] + SIM, cwd=WD, on_line=lambda s, t: seen.append((s, t))
        )
        check(hit.ok and hit.cache == "hit", repr(hit))
        check(seen == hit.console and seen, repr(seen))
        with open(first.neff, "rb") as a, open(hit.neff, "rb") as b:
            check(a.read() == b.read(), "the hit's NEFF is the miss's")
        check(c._conn is conn and conn.answered == 2, "one connection for both compiles")
        # A plan refused, a tool that fails, a usage error: typed failures and their lines.
        plan = c.compile(["missing.hlo", "--output", "m.neff"] + SIM, cwd=WD)
        check(plan.exit_status == 70 and plan.failure == "plan" and plan.neff is None, repr(plan))
        check(any("missing.hlo" in line for line in plan.lines), repr(plan.lines))
        env = dict(nxcc.forwarded_env(), NXCC_SIM_FAULT="hlo2penguin:exit=3")
        tool = c.compile(["m.hlo", "--output", "t.neff", "--no_cache"] + SIM, cwd=WD, env=env)
        check(tool.exit_status == 70, repr(tool))
        check(tool.failure == {"job": {"job": "HLOToTensorizer", "end": {"exited": 3}}}, repr(tool.failure))
        check(not os.path.exists(os.path.join(WD, "t.neff")), "no NEFF from a failed compile")
        usage = c.compile(["m.hlo", "--bogus"] + SIM, cwd=WD)
        check(usage.exit_status == 2 and usage.failure == "usage", repr(usage))
        check("NCC_EARG002" in usage.lines[0], repr(usage.lines))
        # Status.
        status = c.status()
        check(status["running"] == 0 and status["connections"]["open"] == 1, repr(status))
        check(status["pid"] > 0 and status["cache"] is not None, repr(status))
        # Explanations: a hit, a miss saying what differs, a usage error.
        e = c.explain(["m.hlo", "--output", "c.neff"] + SIM, cwd=WD)
        check(e["exit_status"] == 0 and e["explanation"]["verdict"] == "hit", repr(e))
        e = c.explain(["m.hlo", "--output", "c.neff", "--target", "trn1", "--toolchain", "sim"], cwd=WD)
        check(e["exit_status"] == 1 and e["explanation"]["verdict"] == "miss", repr(e))
        check("--target: trn2 → trn1" in e["explanation"]["why"], e["explanation"]["why"])
        check(not os.path.exists(os.path.join(WD, "c.neff")), "explaining compiles nothing")
        e = c.explain(["m.hlo", "--bogus"], cwd=WD)
        check(e["exit_status"] == 2 and e["explanation"] is None and e["error_lines"], repr(e))
        check(c._conn is conn and conn.answered == 9, "every request on one connection")
        # A request the daemon refuses (an environment variable it never takes): an error, and
        # the next request still works.
        err = raises(nxcc.DaemonRefused, lambda: c.compile(["m.hlo"] + SIM, cwd=WD, env={"LD_PRELOAD": "x"}))
        check(err.status == 400 and "LD_PRELOAD" in err.text, str(err))
        check(c.compile(["m.hlo", "--output", "d.neff"] + SIM, cwd=WD).cache == "hit", "after a refusal")
    check(c._conn is None, "closed by the with block")


def idle_connection():
    """The daemon (started with --head-timeout 1) closes the idle connection; the next request
    goes on a new one."""
    c = nxcc.connect()
    first = c.compile(["m.hlo", "--output", "a.neff"] + SIM, cwd=WD)
    check(first.ok, repr(first))
    old = c._conn
    wait_until("the daemon to close the idle connection", old.dropped)
    again = c.compile(["m.hlo", "--output", "b.neff"] + SIM, cwd=WD)
    check(again.ok and again.cache == "hit", repr(again))
    check(c._conn is not old and c._conn.answered == 1, "a new connection")
    c.close()


def daemon_goes_away():
    """The daemon is killed while the client waits for its compile: ConnectionLost, at once; the
    next request finds no daemon."""
    # The compile is the connection's first request (a request on a connection that served
    # others, closed before any byte of its answer came, would be sent once more).
    c = nxcc.connect()
    watcher = nxcc.connect()
    pid = watcher.status()["pid"]
    killed = []

    def kill_when_running():
        wait_until("the compile to run", lambda: watcher.status()["running"] == 1)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    t = threading.Thread(target=kill_when_running)
    t.start()
    env = dict(nxcc.forwarded_env(), NXCC_SIM_WAIT_MS="hlo2penguin:600000")
    e = raises(
        nxcc.ConnectionLost,
        lambda: c.compile(["m.hlo", "--output", "a.neff", "--no_cache"] + SIM, cwd=WD, env=env),
    )
    t.join()
    check(killed == [pid], "killed by the watcher")
    check(c._conn is None, "the broken connection is dropped")
    check(str(e).startswith("the daemon on "), str(e))
    # Once the daemon's processes are gone (its fork server may hold the listening socket a
    # moment longer), no daemon answers there.
    wait_until("the daemon to be gone", lambda: refused(nxcc.connect))
    raises(nxcc.DaemonUnavailable, lambda: c.status())
    watcher.close()


# Stand-in servers: what a daemon (or anything else on the socket) might answer.


class StandIn:
    """A listener on a socket in a fresh directory; each accepted connection is handed to
    `serve(conn, n)` on a thread (n: its number)."""

    def __init__(self, serve):
        self.dir = tempfile.mkdtemp(prefix="nxcc-py-")
        self.path = os.path.join(self.dir, "d.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.serve = serve
        self.accepted = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            n = self.accepted
            self.accepted += 1
            threading.Thread(target=self._one, args=(conn, n), daemon=True).start()

    def _one(self, conn, n):
        try:
            self.serve(conn, n)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


def read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return None
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return head


STATUS = b'{"pid": 1, "running": 0}'


def answer(status_line, body, extra=b""):
    return (
        b"HTTP/1.1 " + status_line + b"\r\ncontent-length: %d\r\n" % len(body) + extra + b"\r\n" + body
    )


def hostile_answers():
    # A daemon that closes a kept-alive connection just as a request is sent (its idle timer):
    # the request is sent once more on a new connection, and succeeds.
    def closes_the_second(conn, n):
        while True:
            if read_request(conn) is None:
                return
            if n == 0 and getattr(closes_the_second, "served", 0) >= 1:
                return  # the request is read, nothing answered: closed
            closes_the_second.served = getattr(closes_the_second, "served", 0) + 1
            conn.sendall(answer(b"200 OK", STATUS))

    s = StandIn(closes_the_second)
    c = nxcc.connect(s.path)
    check(c.status() == {"pid": 1, "running": 0}, "first")
    check(c.status()["pid"] == 1, "second, retried on a new connection")
    check(s.accepted == 2, "two connections: %d" % s.accepted)
    c.close()
    s.close()

    # What is not HTTP, a head without end, a chunk size that is not one, a body cut short, an
    # answer longer than it says: errors, never a hang, and the next request connects again.
    bad = [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx: " + b"y" * (80 << 10),
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcXY",
    ]

    def serve_bad(conn, n):
        if read_request(conn) is not None:
            conn.sendall(bad[n] if n < len(bad) else answer(b"200 OK", STATUS))
            conn.shutdown(socket.SHUT_WR)

    s = StandIn(serve_bad)
    c = nxcc.connect(s.path)
    for k in range(len(bad)):
        e = raises(nxcc.ConnectionLost, c.status)
        check(str(e).startswith("the daemon on %s: " % s.path), str(e))
        check(c._conn is None, "dropped after %d" % k)
    check(c.status()["pid"] == 1, "the next request works")
    c.close()
    s.close()

    # A compile answer that ends without its done line.
    def no_done(conn, n):
        read_request(conn)
        line = b'{"event":"log","line":"half","stream":"stdout"}\n'
        conn.sendall(answer(b"200 OK", line, b"connection: close\r\n"))

    s = StandIn(no_done)
    c = nxcc.connect(s.path)
    e = raises(nxcc.ConnectionLost, lambda: c.compile(["m.pb"], cwd="/"))
    check("ended the answer before the compile finished" in str(e), str(e))
    c.close()
    s.close()

    # Refusals keep their status and text; a stopping daemon is a 503.
    def refuses(conn, n):
        read_request(conn)
        line = [b"403 Forbidden", b"429 Too Many Requests", b"503 Service Unavailable"][n % 3]
        conn.sendall(answer(line, b"no\n", b"connection: close\r\n"))

    s = StandIn(refuses)
    c = nxcc.connect(s.path)
    for status in (403, 429, 503):
        e = raises(nxcc.DaemonRefused, c.status)
        check(e.status == status and e.text == "no", repr((e.status, e.text)))
    c.close()
    s.close()

    # No daemon: a socket path with nothing listening, a missing directory.
    d = tempfile.mkdtemp(prefix="nxcc-py-")
    try:
        path = os.path.join(d, "d.sock")
        raises(nxcc.DaemonUnavailable, lambda: nxcc.connect(path))
        lone = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lone.bind(path)
        lone.close()  # bound, never listening: refused
        e = raises(nxcc.DaemonUnavailable, lambda: nxcc.connect(path))
        check("no daemon answers" in str(e), str(e))
        os.unlink(path)
        raises(nxcc.DaemonUnavailable, lambda: nxcc.connect(os.path.join(d, "no/such/d.sock")))
    finally:
        os.rmdir(d)


def untrusted():
    """Sockets the client must not use: a directory others may write, a link another user could
    have placed, a socket of another user, a daemon run by another user (uid 65534)."""
    nobody = 65534
    base = tempfile.mkdtemp(prefix="nxcc-py-")
    try:
        os.chmod(base, 0o711)

        def listener(d, uid=None):
            """A process listening on d/d.sock (as `uid`: forked, so that nothing of another
            user's must be executable); its pid and the socket's path."""
            path = os.path.join(d, "d.sock")
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    if uid is not None:
                        os.setgid(uid)
                        os.setuid(uid)
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.bind(path)
                    s.listen(1)
                    os.write(w, b"ready")
                    signal.pause()
                finally:
                    os._exit(0)
            os.close(w)
            check(os.read(r, 5) == b"ready", "the listener is up")
            os.close(r)
            return pid, path

        def stop(pid):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)

        # A directory others may write, not sticky.
        open_dir = os.path.join(base, "open")
        os.mkdir(open_dir)
        os.chmod(open_dir, 0o777)
        p, path = listener(open_dir)
        e = raises(nxcc.UntrustedDaemon, lambda: nxcc.connect(path))
        check(
            str(e)
            == "not using the daemon on %s: the daemon's directory %s is writable by group and others "
            "(mode 0777); remove that permission (chmod go-w %s) or make it sticky (chmod +t %s)"
            % (path, open_dir, open_dir, open_dir),
            str(e),
        )
        stop(p)
        # A sticky one: the socket there must be ours or root's.
        sticky = os.path.join(base, "sticky")
        os.mkdir(sticky)
        os.chmod(sticky, 0o1777)
        p, path = listener(sticky, uid=nobody)
        e = raises(nxcc.UntrustedDaemon, lambda: nxcc.connect(path))
        check("the daemon's file %s is owned by uid %d" % (path, nobody) in str(e), str(e))
        # The socket given to root, the daemon still another user's: refused by its credentials.
        os.chown(path, 0, 0)
        e = raises(nxcc.UntrustedDaemon, lambda: nxcc.connect(path))
        check(str(e).endswith("it is run by uid %d, not by you (uid 0) or root" % nobody), str(e))
        stop(p)
        # A link another user placed in a sticky directory, to a directory of ours.
        mine = os.path.join(base, "mine")
        os.mkdir(mine, 0o700)
        q, qpath = listener(mine)
        link = os.path.join(sticky, "link")
        os.symlink(mine, link)
        os.lchown(link, nobody, nobody)
        e = raises(nxcc.UntrustedDaemon, lambda: nxcc.connect(os.path.join(link, "d.sock")))
        check("is reached through the symbolic link %s, which uid %d" % (link, nobody) in str(e), str(e))
        # The same link made ours is followed.
        os.lchown(link, 0, 0)
        c = nxcc.connect(os.path.join(link, "d.sock"))
        c.close()
        stop(q)
    finally:
        shutil.rmtree(base)


def documented_hook():
    """The daemon page's example of a framework's compile hook (docs/daemon.md), taken from the
    page and run as it is: a compile through the daemon, a hit, a failing compile's status and
    failure printed."""
    import contextlib
    import io

    page = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "daemon.md")).read()
    blocks = [b.split("```", 1)[0] for b in page.split("```python\n")[1:]]
    code = [b for b in blocks if "def neuronx_cc(" in b]
    check(len(code) == 1, "docs/daemon.md has one example of a compile hook")
    hook = {}
    exec(compile(code[0], "docs/daemon.md", "exec"), hook)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        first = hook["neuronx_cc"](["compile", "m.hlo", "--output", "a.neff"] + SIM, cwd=WD)
        daemon = hook["_daemon"]
        again = hook["neuronx_cc"](["compile", "m.hlo", "--output", "b.neff"] + SIM, cwd=WD)
        missing = hook["neuronx_cc"](["compile", "missing.hlo", "--output", "c.neff"] + SIM, cwd=WD)
    printed = out.getvalue()
    check(first == 0 and again == 0 and missing == 70, repr((first, again, missing, printed)))
    check(os.path.isfile(os.path.join(WD, "a.neff")) and os.path.isfile(os.path.join(WD, "b.neff")), printed)
    check(not os.path.exists(os.path.join(WD, "c.neff")), printed)
    check("Compiler status PASS" in printed, printed)
    check(printed.rstrip().endswith("plan"), "the failure printed: " + printed)
    check(daemon is not None and hook["_daemon"] is daemon, "one client kept by the hook")
    check(daemon._conn.answered == 3, "the three compiles on one connection")
    daemon.close()


SCENARIOS = {
    f.__name__: f
    for f in (compile_hit_failure_status_explain, idle_connection, daemon_goes_away, hostile_answers, untrusted,
              documented_hook)
}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
    print("ok", sys.argv[1])
