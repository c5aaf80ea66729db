"""A pytest switch that fails any connection to a host other than the loopback interface.

Import the fixture into a conftest (or a test module) to turn it on for every test there::

    from conftest_network import no_external_network  # noqa: F401

Name resolution of anything but a loopback name, and ``connect`` to any non-loopback address,
raise :class:`ExternalNetworkError` (an ``OSError``, so clients see a connection failure and the
test fails loudly instead of reaching the internet).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

__all__ = ["ExternalNetworkError", "is_loopback", "no_external_network"]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class ExternalNetworkError(OSError):
    """A test tried to reach a non-loopback host."""


def is_loopback(host: object) -> bool:
    """Whether ``host`` (a name or an address) is the loopback interface."""
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_external_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any name lookup or connection to a non-loopback host during the test."""
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not is_loopback(host):
            raise ExternalNetworkError(f"tests may not resolve {host!r}: loopback only")
        return real_getaddrinfo(host, *args, **kwargs)

    def check(address: Any) -> None:
        if isinstance(address, tuple) and not is_loopback(address[0]):
            raise ExternalNetworkError(f"tests may not connect to {address[0]!r}: loopback only")

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
