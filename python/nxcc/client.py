"""A client of the nxcc compile daemon for a running Python process: compiles, status and cache
explanations sent over one persistent connection, with no process started per compile.

The socket is found as ``nxcc compile --daemon`` finds it: the ``socket`` given, else
``$NXCC_DAEMON_SOCKET``, else ``$XDG_RUNTIME_DIR/nxcc/daemon.sock`` (``/tmp/nxcc-<uid>/daemon.sock``
without it). It is used only if it passes nxcc's trust rule (``_trust``), and the process
answering on it must be the user's or root's (``SO_PEERCRED``).

The daemon closes a connection left idle for its head timeout (10 s by default); the client
sees that before it sends, and sends on a new connection. A request whose connection is found
closed before any byte of the answer arrived, on a connection that had served earlier requests,
is sent once more on a new one; a daemon that goes away during a compile is a
``ConnectionLost``, and the next request connects again."""

import json
import os
import socket as _socket
import struct

from . import _trust
from ._wire import Connection, WireError

#: The environment variable naming the daemon's socket.
SOCKET_ENV = "NXCC_DAEMON_SOCKET"
#: The variables a compile request may always set (the daemon refuses others).
ALLOWED_ENV = (
    "NEURON_PLATFORM_TARGET_OVERRIDE",
    "NXCC_TOOLCHAIN",
    "NEURON_COMPILE_CACHE_URL",
    "NEURON_CC_FLAGS",
)
#: The simulated toolchain's test variables, sent too (a daemon takes them only when started
#: with ``--allow-test-env``).
TEST_ENV_PREFIX = "NXCC_SIM_"
SOCKET_NAME = "daemon.sock"


class DaemonError(Exception):
    """Anything that stopped a request from getting its answer."""


class DaemonUnavailable(DaemonError):
    """No daemon answers on the socket (none started, or it stopped)."""


class UntrustedDaemon(DaemonError):
    """The socket, its directory or the process answering on it is not the user's or root's."""


class DaemonRefused(DaemonError):
    """The daemon answered the request with an error (``status``: ``403`` not served, ``429``
    over a connection limit, ``503`` stopping, ``400`` a request it cannot take)."""

    def __init__(self, status, text):
        super().__init__("the daemon refused the request (%d): %s" % (status, text))
        self.status = status
        self.text = text


class ConnectionLost(DaemonError):
    """The connection broke, or the daemon answered with what is not HTTP, before the answer
    was complete (the daemon stopped or crashed during the request)."""


class Result:
    """How a compile ended, as the daemon's typed result says it.

    - ``exit_status``: what ``nxcc compile`` would exit with (0, 2 for a usage error, 69 for a
      hit-only cache's miss, 70 for a failure, 130/143 when interrupted or cancelled);
    - ``neff``: the path of the NEFF the compile wrote (``None`` unless it succeeded and wrote one);
    - ``lines``: the error lines it reported (``[ERROR] ...``), in order;
    - ``failure``: what failed, typed (``None`` unless it failed): a string for a failure without
      details (``"usage"``, ``"plan"``, ``"cache_miss"``, ``"internal"``) or a one-key dict
      (``{"job": {"job": "WalrusDriver", "end": {"exited": 1}}}``, ``{"timeout": {...}}``,
      ``{"out_of_memory": {...}}``, ``{"worker_lost": {...}}``, ``{"environment": ...}``,
      ``{"remote": ...}``);
    - ``cache``: ``"hit"``, ``"miss"`` or ``"off"``;
    - ``console``: every console line, as ``(stream, text)`` with ``stream`` ``"stdout"`` or
      ``"stderr"`` — what ``nxcc compile`` would have printed;
    - ``wall_s``: the compile's time in the daemon, seconds; ``compile_id``: the daemon's number
      for it (its log names it)."""

    __slots__ = ("exit_status", "neff", "lines", "failure", "cache", "console", "wall_s", "compile_id")

    def __init__(self, exit_status, neff, lines, failure, cache, console, wall_s, compile_id):
        self.exit_status = exit_status
        self.neff = neff
        self.lines = lines
        self.failure = failure
        self.cache = cache
        self.console = console
        self.wall_s = wall_s
        self.compile_id = compile_id

    @property
    def ok(self):
        """Whether the compile succeeded."""
        return self.exit_status == 0

    def __repr__(self):
        return "Result(exit_status=%r, neff=%r, cache=%r, failure=%r)" % (
            self.exit_status,
            self.neff,
            self.cache,
            self.failure,
        )


def default_socket():
    """``$XDG_RUNTIME_DIR/nxcc/daemon.sock``, or ``/tmp/nxcc-<uid>/daemon.sock``."""
    return os.path.join(_default_dir(), SOCKET_NAME)


def _default_dir():
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "nxcc")
    return "/tmp/nxcc-%d" % os.getuid()


def socket_path(socket=None):
    """The socket a client uses: ``socket``, else ``$NXCC_DAEMON_SOCKET``, else the default;
    made absolute against the current directory."""
    path = os.fspath(socket) if socket is not None else os.environ.get(SOCKET_ENV) or default_socket()
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def forwarded_env(environ=None):
    """The variables of ``environ`` (this process's by default) that travel with a compile."""
    environ = os.environ if environ is None else environ
    return {
        k: v
        for k, v in environ.items()
        if k in ALLOWED_ENV or (k.startswith(TEST_ENV_PREFIX) and len(k) > len(TEST_ENV_PREFIX))
    }


def connect(socket=None):
    """A client of the daemon on ``socket`` (see ``socket_path``), connected.

    Raises ``DaemonUnavailable`` when no daemon answers there, ``UntrustedDaemon`` when the
    socket may not be used."""
    client = Client(socket_path(socket))
    client._connect()
    return client


class Client:
    """One persistent connection to a daemon; requests go one at a time (use a client per
    thread). ``close()`` it, or use it in a ``with`` block."""

    def __init__(self, socket):
        self.socket = socket
        self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Close the connection (a compile still running for it is cancelled by the daemon)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # The requests.

    def compile(self, argv, cwd=None, env=None, on_line=None):
        """Compile: ``argv`` is ``nxcc compile``'s arguments (with or without a leading
        ``compile``), relative paths taken against ``cwd`` (default: the current directory).
        ``env``: the variables sent with it (default: ``forwarded_env()``). ``on_line(stream,
        text)`` is called for each console line as it comes. Returns a ``Result``."""
        body = self._body(argv, cwd, env)
        console = []
        done = {}

        def each(line):
            try:
                event = json.loads(line)
            except ValueError:
                return
            if not isinstance(event, dict):
                return
            kind = event.get("event")
            if kind == "log":
                item = (
                    "stderr" if event.get("stream") == "stderr" else "stdout",
                    str(event.get("line", "")),
                )
                console.append(item)
                if on_line is not None:
                    on_line(*item)
            elif kind == "done":
                done.clear()
                done.update(event)

        head = self._request("POST", "/v1/compile", body, lines=each)
        if not done:
            raise ConnectionLost(
                "the daemon on %s ended the answer before the compile finished" % self.socket
            )
        status = done.get("exit_status")
        status = status if isinstance(status, int) else 70
        output = done.get("output")
        neff = output if status == 0 and isinstance(output, str) and os.path.isfile(output) else None
        compile_id = head.get("x-nxcc-compile-id")
        return Result(
            exit_status=status,
            neff=neff,
            lines=[str(x) for x in done.get("error_lines") or []],
            failure=done.get("failure"),
            cache=done.get("cache"),
            console=console,
            wall_s=done.get("wall_s"),
            compile_id=int(compile_id) if compile_id and compile_id.isdigit() else None,
        )

    def status(self):
        """The daemon's ``GET /v1/status``, as a dict (compiles running and queued, memory,
        the cache and its counters, ...)."""
        return self._json("GET", "/v1/status", None)

    def explain(self, argv, cwd=None, env=None):
        """Whether the compile would be a hit of the daemon's cache, and on a miss what differs
        from the nearest entries (``nxcc cache explain``, in the daemon's world): a dict with
        ``exit_status`` (0 a hit, 1 a miss, 2 or 70 when refused), ``error_lines`` and
        ``explanation`` (``nxcc cache explain --json``'s object, or ``None``)."""
        return self._json("POST", "/v1/explain", self._body(argv, cwd, env))

    # The exchange.

    def _body(self, argv, cwd, env):
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv is a list of arguments, not one string")
        argv = [os.fspath(a) for a in argv]
        cwd = os.fspath(cwd) if cwd is not None else os.getcwd()
        if not os.path.isabs(cwd):
            cwd = os.path.join(os.getcwd(), cwd)
        request = {
            "argv": argv,
            "working_directory": cwd,
            "env": forwarded_env() if env is None else dict(env),
        }
        return json.dumps(request).encode("utf-8")

    def _json(self, method, path, body):
        out = []
        self._request(method, path, body, whole=out.append)
        try:
            return json.loads(out[0].decode("utf-8"))
        except ValueError as e:
            raise ConnectionLost("the daemon on %s answered with what is not JSON (%s)" % (self.socket, e))

    def _connect(self):
        self._conn = Connection(_open(self.socket))

    def _request(self, method, path, body, lines=None, whole=None):
        """Send one request and read its answer (its body's lines to ``lines``, or the whole
        body to ``whole``); returns the answer's head."""
        if self._conn is not None and (not self._conn.usable or self._conn.dropped()):
            self.close()
        for attempt in (0, 1):
            if self._conn is None:
                self._connect()
            conn = self._conn
            reused = conn.answered > 0
            try:
                try:
                    conn.send(method, path, body)
                except (BrokenPipeError, ConnectionResetError) as e:
                    raise WireError("the connection was closed (%s)" % e.strerror, False)
                head = conn.head()
                if head.status != 200:
                    text = conn.body(head).decode("utf-8", "replace").strip()
                    conn.close()
                    self._conn = None
                    if head.status == 408 and reused and attempt == 0:
                        continue
                    raise DaemonRefused(head.status, text)
                if lines is not None:
                    _each_line(conn.chunks(head), lines)
                else:
                    whole(conn.body(head))
                conn.answered += 1
                if not head.keeps_alive():
                    conn.usable = False
                return head
            except WireError as e:
                self.close()
                if reused and not e.received and attempt == 0:
                    continue
                raise ConnectionLost("the daemon on %s: %s" % (self.socket, e))
            except OSError as e:
                self.close()
                raise ConnectionLost("the daemon on %s: %s" % (self.socket, e))
            except BaseException:
                # Interrupted while waiting (Ctrl-C): the daemon sees the connection go and
                # cancels the compile.
                self.close()
                raise
        raise ConnectionLost("the daemon on %s closed the connection twice" % self.socket)


def _each_line(pieces, each):
    pending = b""
    for piece in pieces:
        pending += piece
        *complete, pending = pending.split(b"\n")
        for line in complete:
            each(line.decode("utf-8", "replace"))
    if pending:
        each(pending.decode("utf-8", "replace"))


def _open(path):
    """A socket connected to the daemon on ``path``, once the trust rule is met."""
    parent, name = os.path.split(path)
    default_dir = _default_dir()
    try:
        if parent == default_dir and os.path.exists(default_dir):
            _trust.check_private_dir(default_dir)
        dir_fd = _trust.open_dir(parent or "/")
    except _trust.Untrusted as e:
        raise UntrustedDaemon("not using the daemon on %s: %s" % (path, e))
    except FileNotFoundError:
        raise DaemonUnavailable("no daemon answers on %s: its directory does not exist" % path)
    except OSError as e:
        raise DaemonUnavailable("cannot reach the daemon on %s: %s" % (path, e))
    try:
        try:
            found = _trust.check_socket_entry(dir_fd, name, path)
        except _trust.Untrusted as e:
            raise UntrustedDaemon("not using the daemon on %s: %s" % (path, e))
        if found is None:
            raise DaemonUnavailable("no daemon answers on %s (no socket there)" % path)
        # Through the checked directory's descriptor: what is connected to is what was checked.
        via = "/proc/self/fd/%d/%s" % (dir_fd, name)
        if not os.path.isdir("/proc/self/fd/%d" % dir_fd):
            via = path
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.connect(via)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            sock.close()
            raise DaemonUnavailable("no daemon answers on %s: %s" % (path, e.strerror))
        except OSError as e:
            sock.close()
            raise DaemonUnavailable("cannot connect to %s: %s" % (path, e))
    finally:
        os.close(dir_fd)
    _check_peer(sock, path)
    return sock


def _check_peer(sock, path):
    """The process answering is the user's or root's."""
    try:
        raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("iII"))
        _pid, uid, _gid = struct.unpack("iII", raw)
    except OSError:
        return
    if uid not in (os.geteuid(), 0):
        sock.close()
        raise UntrustedDaemon(
            "not using the daemon on %s: it is run by uid %d, not by you (uid %d) or root"
            % (path, uid, os.geteuid())
        )
