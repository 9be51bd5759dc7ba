"""Who may teach the model: TLS, mutual TLS, bearer tokens and the caller's identity.

* Transport: :func:`server_credentials` (TLS; mutual TLS with a client CA, which
  then requires and verifies a client certificate) and :func:`channel_credentials`.
* Authentication: a bearer token in the ``authorization: Bearer <token>``
  metadata, checked against the tokens of a file (:func:`load_tokens`) in
  constant time (SHA-256 digests compared with :func:`hmac.compare_digest`,
  every token tried), or a client certificate verified by the TLS handshake.
* Authorisation (:class:`AuthInterceptor`): the state-changing RPCs
  (``ReportObservations``, ``ReportBatchStart``, ``ReportBatchEnd``, ``ReportBatchQueued``) need an
  authenticated caller as soon as tokens or a client CA are configured; the
  read-only RPCs are open unless ``protect_reads``; health and reflection stay
  open. A missing or wrong credential is ``UNAUTHENTICATED``; a certificate not
  in the allowed list is ``PERMISSION_DENIED``.
* Identity: the handler reads the caller (:func:`current_caller`): the
  authenticated identity (``token:<name>`` or ``cert:<common name>``) and the
  peer address, used for rate limits and the outlier gate's sources.

Tokens are never logged nor echoed: error messages say what is missing, not
what was sent, and only digests of the tokens are kept in memory.

Examples
--------
>>> policy = AuthPolicy.from_tokens({"collector": "s3cret-token"})
>>> policy.match("s3cret-token"), policy.match("guess")
('collector', None)
>>> "s3cret" in repr(policy)
False
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import logging
import os
import re
import stat
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


def load_tokens(path: str | os.PathLike) -> dict[str, str]:
    """Read a token file: one token per line, ``<name> <token>`` or just ``<token>``; ``#`` comments.

    The name identifies the caller in logs and rate limits (default ``line<N>``). Raises
    ``ValueError`` naming the line of a malformed entry (never its content).
    """
    path = Path(path)
    text = _read(path, "token file").decode("utf-8", "replace")
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRGRP | stat.S_IROTH):
            log.warning("token file %s is readable by other users (chmod 600 it)", path)
    except OSError:
        pass
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) == 1:
            name, token = f"line{number}", parts[0]
        elif len(parts) == 2:
            name, token = parts
        else:
            raise ValueError(f"{path}: line {number}: expected '<name> <token>' or '<token>'")
        if not _NAME.match(name):
            raise ValueError(f"{path}: line {number}: a token name is 1-64 letters, digits or ._@:+-")
        if len(token) < 16:
            raise ValueError(f"{path}: line {number}: a token must be at least 16 characters long")
        if name in tokens:
            raise ValueError(f"{path}: line {number}: token name {name!r} given twice")
        tokens[name] = token
    if not tokens:
        raise ValueError(f"{path}: no token in the file")
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
        Certificate common names allowed to call the state-changing RPCs (empty: any verified one).
    protect_reads
        The read-only RPCs need an authenticated caller too.
    """

    token_digests: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    mutual_tls: bool = False
    allowed_clients: frozenset[str] = frozenset()
    protect_reads: bool = False

    def __post_init__(self) -> None:
        if self.protect_reads and not self.enforced:
            raise ValueError("protecting reads needs a way to authenticate: bearer tokens or mutual TLS")
        if self.allowed_clients and not self.mutual_tls:
            raise ValueError("allowed client certificates need mutual TLS (a client CA)")

    @classmethod
    def from_tokens(cls, tokens: Mapping[str, str], **kwargs: Any) -> AuthPolicy:
        """From ``{client name: token}``; only the tokens' SHA-256 digests are kept."""
        return cls(tuple((name, _digest(token)) for name, token in tokens.items()), **kwargs)

    @property
    def enforced(self) -> bool:
        """Whether any RPC needs authentication (tokens or mutual TLS configured)."""
        return bool(self.token_digests) or self.mutual_tls

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
            return "authentication off: state-changing RPCs are open to anyone who can connect"
        ways = []
        if self.token_digests:
            ways.append(f"{len(self.token_digests)} bearer token(s)")
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
    """``ipv4:10.0.0.5:51234`` → ``10.0.0.5``; ``ipv6:[::1]:5123`` → ``::1``."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        host = address.rsplit(":", 1)[0]
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


class AuthInterceptor(grpc.ServerInterceptor):
    """Authenticates callers, enforces :class:`AuthPolicy`, and records the caller for the handler."""

    def __init__(self, policy: AuthPolicy, prefix: str = PREFIX):
        self.policy = policy
        self.prefix = prefix

    def intercept_service(self, continuation: Callable, handler_call_details: Any) -> Any:
        """Wrap the prediction service's handlers with authentication (health and reflection stay open)."""
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(self.prefix):
            return handler  # health, reflection: open
        name = method[len(self.prefix) :]
        metadata = tuple(handler_call_details.invocation_metadata or ())
        protected = self.policy.enforced and (name in WRITE_METHODS or self.policy.protect_reads)
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
                if (
                    protected
                    and self.policy.allowed_clients
                    and common_name not in self.policy.allowed_clients
                ):
                    self._deny(
                        context,
                        PermissionDenied,
                        name,
                        peer,
                        f"client certificate {common_name!r} is not allowed to call {name}",
                    )
                identity = f"cert:{common_name}"
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

    @staticmethod
    def _deny(
        context: grpc.ServicerContext,
        refusal: type[Unauthenticated | PermissionDenied],
        name: str,
        peer: str,
        message: str,
    ) -> None:
        log.warning("refused %s from %s: %s", name, peer, message)
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

    ``server_name`` overrides the name checked against the server's certificate.
    """
    opts = list(options)
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
    credentials = None
    if options.tls_cert is not None and options.tls_key is not None:
        credentials = server_credentials(options.tls_cert, options.tls_key, options.tls_client_ca)
    tokens = load_tokens(options.auth_token_file) if options.auth_token_file else {}
    policy = AuthPolicy.from_tokens(
        tokens,
        mutual_tls=options.tls_client_ca is not None,
        allowed_clients=frozenset(options.allowed_clients),
        protect_reads=options.protect_reads,
    )
    return credentials, policy
