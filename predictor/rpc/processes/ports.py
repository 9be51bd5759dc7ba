"""Whether ``predictor serve`` may take a port: asked before anything else is loaded.

gRPC binds its ports with ``SO_REUSEPORT`` unless told otherwise: a second server started on a port
already served would start without a word and take a share of the connections. ``predictor serve``
binds exclusively instead (one process: gRPC's ``grpc.so_reuseport`` off, see
:func:`~predictor.rpc.server.create_server`'s ``reuse_port``; ``--workers N``: the workers share the
port with one another only, beside the supervisor's reservation,
:func:`~predictor.rpc.processes.supervisor.reserve_port`), and :func:`check_port_free` refuses a
port that any socket holds, naming it, before the model is loaded.

Light: importing it loads no gRPC.

Examples
--------
>>> import socket
>>> with socket.socket() as held:
...     held.bind(("127.0.0.1", 0)); held.listen()
...     try:
...         check_port_free("127.0.0.1", held.getsockname()[1])
...     except PortInUse as exc:
...         "is already in use" in str(exc)
True
"""

from __future__ import annotations

import errno
import socket


class PortInUse(OSError):
    """The port asked for is held by another socket (a server listening, or one starting)."""


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def check_port_free(host: str, port: int, what: str = "gRPC") -> None:
    """Raise :class:`PortInUse` (an ``OSError``) naming ``host:port`` when a socket holds it.

    The check binds a socket exclusively (``SO_REUSEADDR`` only: connections of an earlier server
    still closing do not count, a listener or a socket bound with ``SO_REUSEPORT`` does) and
    closes it at once. Port 0 (any free port) is always free.

    Parameters
    ----------
    host
        The address the server will bind (``0.0.0.0``, ``127.0.0.1``, ``::``...).
    port
        The port; 0 passes.
    what
        What the port is for, in the message (``gRPC``, ``metrics``).
    """
    if port == 0:
        return
    host = host.strip("[]")
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(
                    f"the {what} port {port} on {host} is already in use (another server listens there; "
                    f"stop it, or choose another port)",
                ) from None
            raise OSError(f"cannot bind the {what} port {port} on {host}: {exc.strerror}") from None
