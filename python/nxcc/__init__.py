"""nxcc from Python: the compile daemon's client for a running process.

A framework that compiles from a Python process (a compile hook that would start
``neuronx-cc compile ...``) sends the compile to the host's nxcc daemon over one persistent
connection instead, and gets the compile's typed result back::

    import nxcc

    client = nxcc.connect()                 # the socket nxcc compile --daemon uses
    result = client.compile(["model.hlo_module.pb", "--target", "trn2", "--output", "model.neff"])
    if result.ok:
        print(result.neff, result.cache)    # the NEFF's path; "hit", "miss" or "off"
    else:
        print("\\n".join(result.lines), result.failure)

Standard library only. The nxcc executables come with the same wheel (``nxcc daemon`` starts a
daemon; ``nxcc compile --daemon`` starts one in the background when none answers)."""

from .client import (
    ALLOWED_ENV,
    SOCKET_ENV,
    Client,
    ConnectionLost,
    DaemonError,
    DaemonRefused,
    DaemonUnavailable,
    Result,
    UntrustedDaemon,
    connect,
    default_socket,
    forwarded_env,
    socket_path,
)

#: The version of nxcc this module belongs to (the crate's).
__version__ = "0.1.0"

__all__ = [
    "ALLOWED_ENV",
    "SOCKET_ENV",
    "Client",
    "ConnectionLost",
    "DaemonError",
    "DaemonRefused",
    "DaemonUnavailable",
    "Result",
    "UntrustedDaemon",
    "connect",
    "default_socket",
    "forwarded_env",
    "socket_path",
]
