"""HTTP/1.1 over one connected socket, as the nxcc daemon speaks it: a request written in one
``sendall``, an answer's head, and its body by its length, chunk by chunk, or to the end of the
connection. Nothing the daemon sends is trusted: a head, a chunk-size line and a whole body are
bounded, and what does not read as HTTP is an error, never a hang or a crash."""

import socket

#: The largest answer head read (status line and headers), bytes.
HEAD_LIMIT = 64 << 10
#: The largest chunk-size line or trailer line, bytes.
LINE_LIMIT = 4 << 10
#: The largest body read whole (``/v1/status``, ``/v1/explain``), bytes.
BODY_LIMIT = 64 << 20
_RECV = 64 << 10


class WireError(Exception):
    """The answer is not HTTP as the daemon sends it, or the connection broke inside it.

    ``received`` says whether any byte of the answer had arrived."""

    def __init__(self, message, received):
        super().__init__(message)
        self.received = received


class Head:
    """An answer's status and headers (names in lower case; repeated ones joined by ``,``)."""

    def __init__(self, status, reason, version, headers):
        self.status = status
        self.reason = reason
        self.version = version
        self.headers = headers

    def get(self, name, default=None):
        return self.headers.get(name, default)

    def keeps_alive(self):
        """Whether the connection may carry another request after this answer."""
        tokens = [t.strip().lower() for t in self.get("connection", "").split(",")]
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


class Connection:
    """One connection to the daemon: requests go out one at a time, each answer read whole
    (or streamed) before the next request."""

    def __init__(self, sock):
        self.sock = sock
        self._buf = bytearray()
        self.answered = 0
        self.usable = True

    def close(self):
        self.usable = False
        try:
            self.sock.close()
        except OSError:
            pass

    def dropped(self):
        """Whether the daemon has closed this (idle) connection: it is readable, and what is
        there is its end — or bytes no request asked for, which make it unusable too."""
        if self._buf:
            return True
        try:
            self.sock.setblocking(False)
            try:
                self.sock.recv(1, socket.MSG_PEEK)
            finally:
                self.sock.setblocking(True)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        # Readable while idle: the daemon's end of it, or bytes no request asked for.
        return True

    def send(self, method, path, body=None):
        """Write one request (``Host``, and a JSON body's type and length)."""
        lines = ["%s %s HTTP/1.1" % (method, path), "Host: nxcc-daemon"]
        if body is not None:
            lines.append("Content-Type: application/json")
            lines.append("Content-Length: %d" % len(body))
        else:
            lines.append("Content-Length: 0")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + (body or b"")
        self.sock.sendall(data)

    # What arrives.

    def _fill(self, received):
        try:
            data = self.sock.recv(_RECV)
        except (ConnectionResetError, BrokenPipeError) as e:
            raise WireError("the connection was reset (%s)" % e.strerror, received)
        if not data:
            raise WireError("the daemon closed the connection", received)
        self._buf += data

    def _line(self, limit, received=True):
        while True:
            at = self._buf.find(b"\r\n")
            if at >= 0:
                line = bytes(self._buf[:at])
                del self._buf[: at + 2]
                return line
            if len(self._buf) > limit:
                raise WireError("a line of the answer is longer than %d bytes" % limit, received)
            self._fill(received)

    def _exactly(self, n):
        while len(self._buf) < n:
            self._fill(True)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def head(self):
        """The answer's head (interim ``1xx`` answers skipped)."""
        while True:
            received = bool(self._buf)
            while b"\r\n\r\n" not in self._buf:
                if len(self._buf) > HEAD_LIMIT:
                    raise WireError("the answer's head is longer than %d bytes" % HEAD_LIMIT, True)
                self._fill(received)
                received = True
            end = self._buf.index(b"\r\n\r\n")
            raw = bytes(self._buf[:end]).decode("latin-1")
            del self._buf[: end + 4]
            head = _parse_head(raw)
            if not 100 <= head.status < 200:
                return head

    def chunks(self, head):
        """The body's bytes, piece by piece as they arrive (``Transfer-Encoding: chunked``, a
        ``Content-Length``, or to the end of the connection)."""
        encoding = head.get("transfer-encoding", "").lower()
        if "chunked" in encoding:
            return self._chunked()
        length = head.get("content-length")
        if length is not None:
            try:
                n = int(length.strip())
            except ValueError:
                raise WireError("a Content-Length that is not a number: %r" % length, True)
            if n < 0:
                raise WireError("a negative Content-Length", True)
            return self._sized(n)
        self.usable = False
        return self._to_close()

    def _chunked(self):
        while True:
            line = self._line(LINE_LIMIT)
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise WireError("a chunk size that is not hexadecimal: %r" % line[:40], True)
            if size < 0:
                raise WireError("a negative chunk size", True)
            if size == 0:
                while self._line(LINE_LIMIT):
                    pass  # trailers
                return
            yield self._exactly(size)
            if self._exactly(2) != b"\r\n":
                raise WireError("a chunk is not followed by CRLF", True)

    def _sized(self, n):
        while n > 0:
            if not self._buf:
                self._fill(True)
            take = min(n, len(self._buf))
            data = bytes(self._buf[:take])
            del self._buf[:take]
            n -= take
            yield data

    def _to_close(self):
        while True:
            if self._buf:
                data = bytes(self._buf)
                self._buf.clear()
                yield data
            try:
                self._fill(True)
            except WireError:
                return

    def body(self, head, limit=BODY_LIMIT):
        """The whole body, at most ``limit`` bytes."""
        out = bytearray()
        for piece in self.chunks(head):
            out += piece
            if len(out) > limit:
                raise WireError("the answer's body is larger than %d bytes" % limit, True)
        return bytes(out)


def _parse_head(raw):
    lines = raw.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise WireError("not an HTTP answer: %r" % lines[0][:80], True)
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise WireError("a malformed header line: %r" % line[:80], True)
        name = name.lower()
        value = value.strip()
        headers[name] = headers[name] + ", " + value if name in headers else value
    return Head(int(parts[1]), parts[2] if len(parts) > 2 else "", parts[0], headers)
