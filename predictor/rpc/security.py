"""Who may teach the model: TLS, mutual TLS, bearer tokens and the caller's identity.

* Transport: :func:`server_credentials` (TLS; mutual TLS with a client CA, which
  then requires and verifies a client certificate) and :func:`channel_credentials`.
* Authentication: a bearer token in the ``authorization: Bearer <token>``
  metadata, checked against the token file's SHA-256 digests
  (:func:`load_token_entries`) in constant time (:func:`hmac.compare_digest`,
  every entry tried), or a client certificate verified by the TLS handshake.
* Roles (:data:`ROLES`): ``read`` (the answers: PredictLatency, CheckDeadline,
  RankPlacements, PlanPipeline, GetStatus), ``observe`` (the reports:
  ReportObservations, ReportBatchStart, ReportBatchEnd, ReportBatchQueued),
  ``metrics`` (scraping the Prometheus endpoint) and ``admin`` (every role, and
  any state operation). A token's roles are in its line of the token file; a
  certificate's are given with ``--allowed-client CN=role,role``.
* Authorisation (:class:`AuthInterceptor`): the state-changing RPCs need an
  authenticated caller with the ``observe`` role as soon as tokens or a client
  CA are configured; the answers are open to anyone unless ``protect_reads``
  (then they need the ``read`` role); health and reflection stay open. A
  missing or wrong credential is ``UNAUTHENTICATED``; a credential without the
  role a call needs is ``PERMISSION_DENIED`` naming the role. With no
  credential configured, the state-changing RPCs are taken only from this
  machine (loopback addresses, Unix sockets) unless ``open_writes``
  (``--allow-unauthenticated-writes``).
* Identity: the handler reads the caller (:func:`current_caller`): the
  authenticated identity (``token:<name>`` or ``cert:<common name>``) and the
  peer address, used for rate limits and the outlier gate's sources.
* Refusals are logged at most a few lines per period (:class:`RefusalLog`),
  the ones left out counted in the next line.

The token file (``--auth-token-file``), one token per line, ``#`` comments::

    # name       secret                                                                  roles
    dashboard    sha256:4f7ad6d1c3c1e6a0b1f7f2c3f3f0b3e39a44c3d43b23a0e1bdfa38d5e5f42a91  roles=read
    collector-1  sha256:9a1d0c6a8d5e2f3b4c7a6e5d4c3b2a190817263544536271809a8b7c6d5e4f30  roles=observe,read
    ops          sha256:0c5b2f7e8d9a1b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4  roles=admin

* the name identifies the caller in logs, rate limits and exactly-once learning
  (1-64 letters, digits or ``._@:+-``; a line of a secret alone is named ``line<N>``);
* the secret is ``sha256:`` and the hex SHA-256 of the token's UTF-8 bytes (what
  ``printf %s "$TOKEN" | sha256sum`` prints): the file holds no token. The token
  itself (at least 16 characters) is still read, with a warning;
* ``roles=`` lists the line's roles, comma-separated; a line without it has
  :data:`UNNAMED_ROLES` (``read``, ``observe``, ``metrics``: what any token could do
  before roles), with a warning.

A client's token file (:func:`read_token`) holds the token itself, in the same format.

Tokens are never logged nor echoed: error messages say what is missing, not
what was sent, and only digests of the tokens are kept in memory.

Examples
--------
>>> policy = AuthPolicy.from_tokens({"collector": "s3cret-token"}, roles={"collector": ["observe"]})
>>> policy.match("s3cret-token"), policy.match("guess")
('collector', None)
>>> policy.allows("token:collector", "observe"), policy.allows("token:collector", "read")
(True, False)
>>> "s3cret" in repr(policy)
False
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import ipaddress
import logging
import math
import os
import re
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import grpc

from predictor.rpc.errors import PermissionDenied, Unauthenticated, abort
from predictor.rpc.names import METHOD_PREFIX
from predictor.rpc.processes.options import ServeOptions

PREFIX = METHOD_PREFIX
WRITE_METHODS = frozenset({"ReportObservations", "ReportBatchStart", "ReportBatchEnd", "ReportBatchQueued"})
FRONT_PEER_KEY = "x-predictor-peer"
"""The metadata key the admission front (:mod:`predictor.rpc.front`) passes a caller's address under."""
READ_METHODS = frozenset({"PredictLatency", "CheckDeadline", "RankPlacements", "PlanPipeline", "GetStatus"})
READ, OBSERVE, METRICS, ADMIN = "read", "observe", "metrics", "admin"
ROLES = (READ, OBSERVE, METRICS, ADMIN)
"""The roles a token or certificate may hold: ``admin`` holds every other."""
UNNAMED_ROLES = frozenset({READ, OBSERVE, METRICS})
"""The roles of a token line without ``roles=`` (what any token could do before roles)."""
CERTIFICATE_ROLES = frozenset({READ, OBSERVE})
"""The roles of a verified client certificate named without roles (or of any, with no ``--allowed-client``)."""
AUTH_KEY = "authorization"
_NAME = re.compile(r"^[A-Za-z0-9._@:+-]{1,64}$")
log = logging.getLogger("predictor.rpc.security")


# --------------------------------------------------------------------------- transport


def _read(path: str | os.PathLike, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def server_credentials(
    cert_file: str | os.PathLike, key_file: str | os.PathLike, client_ca_file: str | os.PathLike | None = None
) -> grpc.ServerCredentials:
    """TLS credentials of the server; with ``client_ca_file``, mutual TLS (client certificates required)."""
    pair = (_read(key_file, "TLS key"), _read(cert_file, "TLS certificate"))
    client_ca = _read(client_ca_file, "client CA") if client_ca_file is not None else None
    return grpc.ssl_server_credentials(
        [pair], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def channel_credentials(
    ca_file: str | os.PathLike | None = None,
    cert_file: str | os.PathLike | None = None,
    key_file: str | os.PathLike | None = None,
) -> grpc.ChannelCredentials:
    """TLS credentials of a client: the CA that signed the server (default: the system's), and a
    client certificate and key for mutual TLS."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("give both a client certificate and its key, or neither")
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca_file, "CA certificate") if ca_file is not None else None,
        private_key=_read(key_file, "TLS key") if key_file is not None else None,
        certificate_chain=_read(cert_file, "TLS certificate") if cert_file is not None else None,
    )


# --------------------------------------------------------------------------- tokens


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def role_of(method: str) -> str:
    """The role calling ``method`` needs (``read``, ``observe``; ``admin`` for any other method)."""
    if method in READ_METHODS:
        return READ
    return OBSERVE if method in WRITE_METHODS else ADMIN


def parse_roles(text: str, where: str) -> frozenset[str]:
    """The roles of a comma-separated list (``ValueError`` naming ``where`` for an unknown or missing one)."""
    roles = frozenset(r.strip() for r in text.split(",") if r.strip())
    unknown = sorted(roles - set(ROLES))
    if unknown or not roles:
        raise ValueError(f"{where}: {'unknown role ' + repr(unknown[0]) if unknown else 'no role given'} "
                         f"(roles: {', '.join(ROLES)})")
    return roles


@dataclass(frozen=True)
class TokenEntry:
    """One line of a token file: its name, the token's SHA-256 digest, its roles, and whether the line
    held the token itself (rather than its digest) or named no roles."""

    name: str
    digest: bytes = field(repr=False)
    roles: frozenset[str] = UNNAMED_ROLES
    plaintext: bool = False
    unnamed_roles: bool = False


_DIGEST = re.compile(r"^sha256:([0-9a-fA-F]{64})$")


def _token_lines(path: Path) -> list[tuple[int, str, str, frozenset[str] | None]]:
    """``(line number, name, secret, roles or None)`` of each token line of ``path`` (format: the module)."""
    text = _read(path, "token file").decode("utf-8", "replace")
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRGRP | stat.S_IROTH):
            log.warning("token file %s is readable by other users (chmod 600 it)", path)
    except OSError:
        pass
    lines: list[tuple[int, str, str, frozenset[str] | None]] = []
    names: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        roles = None
        if len(parts) > 1 and parts[-1].startswith("roles="):
            roles = parse_roles(parts.pop()[len("roles="):], f"{path}: line {number}")
        if len(parts) == 1:
            name, secret = f"line{number}", parts[0]
        elif len(parts) == 2:
            name, secret = parts
        else:
            raise ValueError(f"{path}: line {number}: expected '<name> <token>' or '<token>', then optionally "
                             "'roles=<role>[,<role>...]'")
        if not _NAME.match(name):
            raise ValueError(f"{path}: line {number}: a token name is 1-64 letters, digits or ._@:+-")
        if not _DIGEST.match(secret) and len(secret) < 16:
            raise ValueError(f"{path}: line {number}: a token must be at least 16 characters long")
        if name in names:
            raise ValueError(f"{path}: line {number}: token name {name!r} given twice")
        names.add(name)
        lines.append((number, name, secret, roles))
    if not lines:
        raise ValueError(f"{path}: no token in the file")
    return lines


def load_token_entries(path: str | os.PathLike) -> list[TokenEntry]:
    """The server's view of a token file (format: the module's docstring): a :class:`TokenEntry` per line.

    Raises ``ValueError`` naming the line of a malformed entry (never its content). A line holding
    the token itself, or naming no roles, is read with a warning naming the line.
    """
    path = Path(path)
    entries = []
    for number, name, secret, roles in _token_lines(path):
        digest = _DIGEST.match(secret)
        if digest is None:
            log.warning("token file %s: line %d holds a token, not its digest: write sha256:<hex> "
                        "(printf %%s TOKEN | sha256sum) so that the file holds no secret", path, number)
        if roles is None:
            log.warning("token file %s: line %d names no roles: it gets %s (add roles=...)", path, number,
                        ",".join(sorted(UNNAMED_ROLES)))
        entries.append(TokenEntry(name, bytes.fromhex(digest.group(1)) if digest else _digest(secret),
                                  roles if roles is not None else UNNAMED_ROLES, digest is None, roles is None))
    return entries


def load_tokens(path: str | os.PathLike) -> dict[str, str]:
    """The tokens themselves of a token file (a client's: format in the module's docstring; roles ignored).

    Raises ``ValueError`` naming the line of a malformed entry (never its content), or of a line
    holding a digest (a client needs the token).
    """
    path = Path(path)
    tokens = {}
    for number, name, secret, _ in _token_lines(path):
        if _DIGEST.match(secret):
            raise ValueError(f"{path}: line {number}: holds a sha256: digest; a client needs the token itself")
        tokens[name] = secret
    return tokens


@dataclass(frozen=True)
class AuthPolicy:
    """Who may call what.

    Parameters
    ----------
    token_digests
        ``(name, SHA-256 of the token)`` of the accepted bearer tokens.
    mutual_tls
        Client certificates are verified by the TLS handshake (the server has a client CA).
    allowed_clients
        Certificate common names with roles (empty: any verified certificate has
        :data:`CERTIFICATE_ROLES`; else one not named has none).
    protect_reads
        The read-only RPCs need an authenticated caller too (with the ``read`` role).
    token_roles
        ``(name, roles)`` of the tokens; a token not named has :data:`UNNAMED_ROLES`.
    client_roles
        ``(common name, roles)`` of allowed certificates; one allowed but not named has
        :data:`CERTIFICATE_ROLES`.
    open_writes
        With no credential configured, anyone who can connect may call the state-changing RPCs
        (``--allow-unauthenticated-writes``); default: only callers on this machine (loopback
        addresses, Unix sockets).
    behind_front
        The server is reached through the admission front (:mod:`predictor.rpc.front`): a
        caller's address is the one the front passes as :data:`FRONT_PEER_KEY` metadata.
    """

    token_digests: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    mutual_tls: bool = False
    allowed_clients: frozenset[str] = frozenset()
    protect_reads: bool = False
    token_roles: tuple[tuple[str, frozenset[str]], ...] = ()
    client_roles: tuple[tuple[str, frozenset[str]], ...] = ()
    open_writes: bool = False
    behind_front: bool = False

    def __post_init__(self) -> None:
        if self.protect_reads and not self.enforced:
            raise ValueError("protecting reads needs a way to authenticate: bearer tokens or mutual TLS")
        if self.allowed_clients and not self.mutual_tls:
            raise ValueError("allowed client certificates need mutual TLS (a client CA)")
        if self.open_writes and self.enforced:
            raise ValueError("--allow-unauthenticated-writes with credentials configured (tokens or a client CA): "
                             "writes then need a credential; drop one of the two")
        for _, roles in (*self.token_roles, *self.client_roles):
            parse_roles(",".join(roles), "roles")
        roles = {f"token:{name}": r for name, r in self.token_roles}
        roles |= {f"cert:{name}": r for name, r in self.client_roles}
        object.__setattr__(self, "_roles", roles)

    @classmethod
    def from_tokens(cls, tokens: Mapping[str, str], roles: Mapping[str, Iterable[str]] | None = None,
                    **kwargs: Any) -> AuthPolicy:
        """From ``{client name: token}`` and, optionally, ``{client name: roles}`` (a name not given has
        :data:`UNNAMED_ROLES`); only the tokens' SHA-256 digests are kept."""
        named = tuple((name, frozenset(r)) for name, r in (roles or {}).items())
        return cls(tuple((name, _digest(token)) for name, token in tokens.items()), token_roles=named, **kwargs)

    @classmethod
    def from_entries(cls, entries: Iterable[TokenEntry], **kwargs: Any) -> AuthPolicy:
        """From the entries of a token file (:func:`load_token_entries`)."""
        entries = list(entries)
        return cls(tuple((e.name, e.digest) for e in entries), token_roles=tuple((e.name, e.roles) for e in entries),
                   **kwargs)

    @property
    def enforced(self) -> bool:
        """Whether any RPC needs authentication (tokens or mutual TLS configured)."""
        return bool(self.token_digests) or self.mutual_tls

    def protects(self, method: str) -> bool:
        """Whether calling ``method`` needs an authenticated caller with its role."""
        return self.enforced and (role_of(method) != READ or self.protect_reads)

    def roles_of(self, identity: str) -> frozenset[str]:
        """The roles of an authenticated identity (``token:<name>``, ``cert:<common name>``); ``admin``
        stands for every role."""
        roles = self._roles.get(identity)  # type: ignore[attr-defined]
        if roles is not None:
            return frozenset(ROLES) if ADMIN in roles else roles
        kind, _, name = identity.partition(":")
        if kind == "token":
            return UNNAMED_ROLES if any(n == name for n, _ in self.token_digests) else frozenset()
        if kind == "cert":
            return CERTIFICATE_ROLES if not self.allowed_clients or name in self.allowed_clients else frozenset()
        return frozenset()

    def allows(self, identity: str, role: str) -> bool:
        """Whether ``identity`` holds ``role``."""
        return role in self.roles_of(identity)

    def match(self, token: str) -> str | None:
        """The name of ``token``, or ``None``: constant time in the token, every entry compared."""
        presented = _digest(token)
        found = None
        for name, digest in self.token_digests:
            if hmac.compare_digest(presented, digest):
                found = name
        return found

    def describe(self) -> str:
        """The policy in words (no secret in it)."""
        if not self.enforced:
            if self.open_writes:
                return ("authentication off (--allow-unauthenticated-writes): state-changing RPCs are open to "
                        "anyone who can connect")
            return ("no credential configured: state-changing RPCs only from this machine (loopback, Unix "
                    "sockets), reads open; --auth-token-file or --tls-client-ca to take reports from elsewhere")
        ways = []
        if self.token_digests:
            counts: dict[str, int] = {}
            for name, _ in self.token_digests:
                for role in sorted(self.roles_of(f"token:{name}")):
                    counts[role] = counts.get(role, 0) + 1
            by_role = ", ".join(f"{role} {counts.get(role, 0)}" for role in ROLES if role != ADMIN)
            ways.append(f"{len(self.token_digests)} bearer token(s) (by role: {by_role})")
        if self.mutual_tls:
            who = (
                ", ".join(sorted(self.allowed_clients))
                if self.allowed_clients
                else "any verified certificate"
            )
            ways.append(f"client certificates ({who})")
        reads = "protected" if self.protect_reads else "open"
        return f"writes need {' or '.join(ways)}; reads {reads}; health and reflection open"


# --------------------------------------------------------------------------- the caller


class Caller(NamedTuple):
    """Who is calling: the authenticated identity ("" when none) and the peer's address."""

    identity: str
    peer: str


_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("predictor_caller", default=None)


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string: ``ipv4:10.0.0.5:51234`` → ``10.0.0.5``; ``ipv6:[::1]:5123``, or
    percent-encoded as gRPC writes it, ``ipv6:%5B::1%5D:5123`` → ``::1``.

    >>> peer_host("ipv4:10.0.0.5:51234"), peer_host("ipv6:[::1]:5123"), peer_host("ipv6:%5B::1%5D:5123")
    ('10.0.0.5', '::1', '::1')
    """
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        host = urllib.parse.unquote(address).rsplit(":", 1)[0]
        return host.strip("[]")
    return peer


def current_caller(context: grpc.ServicerContext | None = None) -> Caller:
    """The caller of the RPC being handled (set by :class:`AuthInterceptor`; else from ``context``)."""
    caller = _CALLER.get()
    if caller is not None:
        return caller
    peer = context.peer() if context is not None else ""
    return Caller("", peer_host(peer or ""))


def certificate_identity(context: grpc.ServicerContext) -> str | None:
    """The common name (else first SAN) of the client certificate verified by the handshake."""
    try:
        auth = context.auth_context()
    except Exception:  # not a secure channel
        return None
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        values = auth.get(key) or []
        if values:
            value = values[0]
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return None


def is_local(peer: str) -> bool:
    """Whether a peer (as :func:`peer_host` gives it) is on this machine: a loopback address or a Unix socket.

    >>> is_local("127.0.0.1"), is_local("::1"), is_local("::ffff:127.0.0.1"), is_local("unix:/tmp/s"), is_local("10.0.0.5")
    (True, True, True, True, False)
    """
    if peer.startswith("unix"):
        return True
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return peer == "localhost"
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


class RefusalLog:
    """Refused calls, logged at most ``burst`` lines per ``period_s``; the refusals left out are counted
    and the count is said in the next line logged.

    Parameters
    ----------
    logger
        Where the lines go (warnings).
    burst
        Lines per period.
    period_s
        The period, seconds.
    clock
        Monotonic seconds.

    Examples
    --------
    >>> import logging
    >>> now = [0.0]
    >>> refusals = RefusalLog(logging.getLogger("doctest"), burst=2, period_s=10, clock=lambda: now[0])
    >>> [refusals.refused("ReportBatchStart", "10.0.0.5", "no token") for _ in range(5)]
    [True, True, False, False, False]
    >>> now[0] = 11.0; refusals.refused("ReportBatchStart", "10.0.0.5", "no token"), refusals.left_out
    (True, 0)
    >>> refusals.total
    6
    """

    def __init__(self, logger: logging.Logger, burst: int = 5, period_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.burst = burst
        self.period_s = period_s
        self.clock = clock
        self.total = 0  # refusals, logged or not
        self.left_out = 0  # refusals not logged since the last line
        self._lines = 0
        self._period_start = -math.inf
        self._lock = threading.Lock()

    def refused(self, method: str, peer: str, message: str) -> bool:
        """Count a refusal of ``method`` from ``peer``; log it unless this period's lines are spent.
        Returns whether it was logged."""
        with self._lock:
            self.total += 1
            now = self.clock()
            if now - self._period_start >= self.period_s:
                self._period_start, self._lines = now, 0
            if self._lines >= self.burst:
                self.left_out += 1
                return False
            self._lines += 1
            left_out, self.left_out = self.left_out, 0
        if left_out:
            self.logger.warning("refused %s from %s: %s (%d refusals not logged since the last line)", method, peer,
                                message, left_out)
        else:
            self.logger.warning("refused %s from %s: %s", method, peer, message)
        return True


class AuthInterceptor(grpc.ServerInterceptor):
    """Authenticates callers, enforces :class:`AuthPolicy`, and records the caller for the handler."""

    def __init__(self, policy: AuthPolicy, prefix: str = PREFIX):
        self.policy = policy
        self.prefix = prefix
        self.refusals = RefusalLog(log)

    def intercept_service(self, continuation: Callable, handler_call_details: Any) -> Any:
        """Wrap the prediction service's handlers with authentication (health and reflection stay open)."""
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(self.prefix):
            return handler  # health, reflection: open
        name = method[len(self.prefix) :]
        metadata = tuple(handler_call_details.invocation_metadata or ())
        protected = self.policy.protects(name)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap(handler.unary_unary, name, metadata, protected),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap(handler.stream_unary, name, metadata, protected),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _wrap(self, behaviour: Callable, name: str, metadata: tuple, protected: bool) -> Callable:
        def checked(request: Any, context: grpc.ServicerContext) -> Any:
            caller = self._authenticate(name, metadata, context, protected)
            token = _CALLER.set(caller)
            try:
                return behaviour(request, context)
            finally:
                _CALLER.reset(token)

        return checked

    def _authenticate(
        self, name: str, metadata: Iterable[tuple[str, Any]], context: grpc.ServicerContext, protected: bool
    ) -> Caller:
        peer = peer_host(context.peer() or "")
        if self.policy.behind_front:  # the caller's address as the front saw it (the front drops a caller's own)
            forwarded = [value for key, value in metadata if key == FRONT_PEER_KEY]
            if forwarded:
                value = forwarded[0]
                peer = peer_host(value if isinstance(value, str) else value.decode("latin-1"))
        headers = [value for key, value in metadata if key == AUTH_KEY]
        identity = ""
        if headers and self.policy.token_digests:  # without tokens configured, the header means nothing
            value = headers[0] if isinstance(headers[0], str) else headers[0].decode("latin-1")
            scheme, _, token = value.partition(" ")
            if len(headers) > 1 or scheme.lower() != "bearer" or not token.strip():
                self._deny(
                    context,
                    Unauthenticated,
                    name,
                    peer,
                    "malformed authorization metadata: send exactly one 'authorization: Bearer <token>'",
                )
            matched = self.policy.match(token.strip())
            if matched is None:
                self._deny(
                    context, Unauthenticated, name, peer, "the bearer token is not valid"
                )
            identity = f"token:{matched}"
        elif self.policy.mutual_tls:
            common_name = certificate_identity(context)
            if common_name is not None:
                identity = f"cert:{common_name}"
        role = role_of(name)
        if protected and identity and not self.policy.allows(identity, role):
            kind, _, who = identity.partition(":")
            held = ",".join(r for r in ROLES if r in self.policy.roles_of(identity)) or "none"
            self._deny(
                context,
                PermissionDenied,
                name,
                peer,
                f"{'client certificate' if kind == 'cert' else 'token'} {who!r} is not allowed to call {name}: "
                f"it needs the '{role}' role (its roles: {held})",
            )
        if not identity and not self.policy.enforced and role != READ and not self.policy.open_writes \
                and not is_local(peer):
            self._deny(
                context,
                PermissionDenied,
                name,
                peer,
                f"{name} needs the '{role}' role: with no credential configured, only callers on the server's "
                "machine may call it (start the server with --auth-token-file or --tls-client-ca, or "
                "--allow-unauthenticated-writes)",
            )
        if protected and not identity:
            what = "changes the model's state" if name in WRITE_METHODS else "is protected (--protect-reads)"
            self._deny(
                context,
                Unauthenticated,
                name,
                peer,
                f"{name} {what}: send 'authorization: Bearer <token>' metadata"
                + (" or connect with a client certificate" if self.policy.mutual_tls else ""),
            )
        return Caller(identity, peer)

    def _deny(
        self,
        context: grpc.ServicerContext,
        refusal: type[Unauthenticated | PermissionDenied],
        name: str,
        peer: str,
        message: str,
    ) -> None:
        self.refusals.refused(name, peer, message)
        abort(context, refusal(message))


# --------------------------------------------------------------------------- client side


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


class _Details(_CallDetails, grpc.ClientCallDetails):
    pass


class BearerToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Client interceptor adding ``authorization: Bearer <token>`` to every call."""

    def __init__(self, token: str):
        if not token or any(c in token for c in "\r\n"):
            raise ValueError("a bearer token must be a non-empty single line")
        self._header = (AUTH_KEY, f"Bearer {token}")

    def __repr__(self) -> str:
        return "BearerToken(<hidden>)"

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [m for m in (details.metadata or ()) if m[0] != AUTH_KEY] + [self._header]
        return _Details(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Callable, details: Any, request: Any) -> Any:
        """Make the call with the bearer token in its metadata."""
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable, details: Any, request: Any) -> Any:
        """Make the call with the bearer token in its metadata."""
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Callable, details: Any, request_iterator: Any) -> Any:
        """Make the call with the bearer token in its metadata."""
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation: Callable, details: Any, request_iterator: Any) -> Any:
        """Make the call with the bearer token in its metadata."""
        return continuation(self._details(details), request_iterator)


def read_token(path: str | os.PathLike) -> str:
    """The single token of a client's token file (the first token line; a ``name`` before it is ignored)."""
    return next(iter(load_tokens(path).values()))


def open_channel(
    target: str,
    *,
    credentials: grpc.ChannelCredentials | None = None,
    token: str | None = None,
    server_name: str | None = None,
    options: Iterable[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A channel to ``target``: TLS when ``credentials`` are given, with a bearer token when ``token`` is.

    ``server_name`` overrides the name checked against the server's certificate. A target of several
    addresses (``ipv4:HOST:P1,HOST:P2``: ``predictor serve --workers N --targets-file``) is balanced:
    the channel connects to each and sends its calls round robin (unless ``options`` name a policy).
    """
    opts = list(options)
    if "," in target and not any(name == "grpc.lb_policy_name" for name, _ in opts):
        opts.append(("grpc.lb_policy_name", "round_robin"))
    if server_name:
        opts.append(("grpc.ssl_target_name_override", server_name))
    if credentials is not None:
        channel = grpc.secure_channel(target, credentials, options=opts)
    else:
        channel = grpc.insecure_channel(target, options=opts)
    if token is not None:
        channel = grpc.intercept_channel(channel, BearerToken(token))
    return channel


def security_from_options(options: ServeOptions) -> tuple[Any, Any]:
    """``(server credentials or None, AuthPolicy)`` from the options; ``ValueError`` when inconsistent."""
    if (options.tls_cert is None) != (options.tls_key is None):
        raise ValueError("give both --tls-cert and --tls-key, or neither")
    if options.tls_client_ca is not None and options.tls_cert is None:
        raise ValueError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
    if options.metrics_token and not options.auth_token_file:
        raise ValueError("--metrics-token needs --auth-token-file (the tokens a scrape may present)")
    if options.open_metrics and options.metrics_token:
        raise ValueError("--open-metrics and --metrics-token contradict each other")
    credentials = None
    if options.tls_cert is not None and options.tls_key is not None:
        credentials = server_credentials(options.tls_cert, options.tls_key, options.tls_client_ca)
    entries = load_token_entries(options.auth_token_file) if options.auth_token_file else []
    clients = [parse_allowed_client(text) for text in options.allowed_clients]
    policy = AuthPolicy.from_entries(
        entries,
        mutual_tls=options.tls_client_ca is not None,
        allowed_clients=frozenset(name for name, _ in clients),
        client_roles=tuple((name, roles) for name, roles in clients if roles is not None),
        protect_reads=options.protect_reads,
        open_writes=options.allow_unauthenticated_writes,
        behind_front=options.front,
    )
    return credentials, policy


def parse_allowed_client(text: str) -> tuple[str, frozenset[str] | None]:
    """``--allowed-client CN`` or ``CN=role,role``: the common name and its roles (``None``: not given,
    :data:`CERTIFICATE_ROLES`).

    >>> name, roles = parse_allowed_client("collector-1=observe,read"); name, sorted(roles)
    ('collector-1', ['observe', 'read'])
    """
    name, equals, roles = text.partition("=")
    if not name:
        raise ValueError(f"--allowed-client {text!r}: give a certificate common name")
    return name, parse_roles(roles, f"--allowed-client {name}") if equals else None


def start_warnings(options: ServeOptions, policy: AuthPolicy, credentials: Any) -> list[str]:
    """What ``predictor serve`` warns about at start: writes open to anyone, tokens over plaintext, metrics
    left open beside tokens."""
    warnings = []
    if policy.open_writes:
        warnings.append(f"--allow-unauthenticated-writes: anyone who can connect to {options.host}:{options.port} "
                        "can report observations and batches and so teach the model")
    if policy.token_digests and credentials is None:
        warnings.append("bearer tokens over a plaintext port can be read off the network: use --tls-cert/--tls-key")
    if policy.token_digests and options.open_metrics and options.metrics_port:
        warnings.append("--open-metrics: the Prometheus endpoint answers without a token")
    return warnings


def metrics_policy(options: ServeOptions, policy: AuthPolicy) -> AuthPolicy | None:
    """The policy a Prometheus scrape is checked against (a token with the ``metrics`` role), or ``None``
    when the endpoint is open: whenever tokens are configured, unless ``--open-metrics``."""
    if policy.token_digests and not options.open_metrics:
        return policy
    return None
