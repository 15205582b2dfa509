"""Where the ranks meet for torch.distributed: rank 0's address every host reaches, agreed over MPI."""
from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import select
import socket
import threading
import time
from typing import Any, Iterator

from mpignn import env as _env
from mpignn.errors import LaunchError, mark_agreed
from mpignn.mpi.startup import mpi_ifnames
from mpignn.mpi.topology import gather_per_host

__all__ = ["rendezvous_endpoint", "PROBE_SECONDS"]

log = logging.getLogger(__name__)

PROBE_SECONDS = 2.0
"""Seconds a host tries each of rank 0's candidates: a LAN answers in milliseconds, a management network never."""

_HINT = ("HINT: set MPIGNN_SOCKET_IFNAME to the interface the hosts reach each other on (see `ip -4 addr`), "
         "or MASTER_ADDR to rank 0's address on it")


def rendezvous_endpoint(comm: Any) -> tuple[str, str | None]:
    """Collective over `comm`: every rank must call it, in the same order. Return rank 0's address the other
    hosts reach (MASTER_ADDR) and this rank's interface on its subnet (GLOO_SOCKET_IFNAME; None on one host).

    Across hosts never loopback (host names mapped to 127.0.1.1 are common): a named interface, else a subnet
    every host shares; where several do (a management network), the first every host connects to within
    PROBE_SECONDS, MPI's interfaces first (docs/launchers-and-devices.md). Raises LaunchError on every rank
    alike when no such address exists.
    """
    reports = gather_per_host(comm, None, lambda _: _env.ipv4_interfaces() if comm.rank != 0 else None)
    others = [r for r in reports[1:] if r is not None] if comm.rank == 0 else []
    plan: tuple[list[tuple[str, str]], list[tuple[str, int]], str] = ([], [], "")
    listeners: list[socket.socket] = []
    if comm.rank == 0:
        try:
            candidates = _candidates(others)
            for address, _ in candidates if len(candidates) > 1 else []:
                try:
                    listeners.append(_env.listen_socket(address))
                except OSError as exc:
                    for sock in listeners:
                        sock.close()
                    raise LaunchError(f"expected to listen on rank 0's address {address} to test which address the "
                                      f"hosts reach; got {exc}. {_HINT}") from None
            plan = (candidates, [s.getsockname()[:2] for s in listeners], "")
        except LaunchError as exc:
            plan = ([], [], str(exc))
    candidates, endpoints, problem = comm.bcast(plan, root=0)
    if problem:
        raise mark_agreed(LaunchError(problem))
    address, network = candidates[0]
    if endpoints:
        with _draining(listeners):
            reached = gather_per_host(comm, None, lambda _: _reached(endpoints) if comm.rank != 0 else None)
        answer = _first_reached(candidates, [r for r in reached if r is not None]) if comm.rank == 0 else None
        address, network, problem = comm.bcast(answer, root=0)
    if problem:
        raise mark_agreed(LaunchError(problem))
    ifname = None
    if network:  # the gloo transport binds what the host name resolves to unless told: tell it the same subnet
        own = [i for i in _env.ipv4_interfaces() if ipaddress.ip_address(i.address) in ipaddress.ip_network(network)]
        ifname = own[0].name if own else None
    return address, ifname


def _candidates(others: list[list[_env.Interface]]) -> list[tuple[str, str]]:
    """Rank 0: the (address, subnet or "") pairs to meet on, best first."""
    user = os.environ.get("MASTER_ADDR")  # the user's wins over the address mpignn would pick
    if user:
        return [(user, "")]
    if not others:
        return [(_env.host_address(), "")]
    mine = _env.ipv4_interfaces()
    named = _env.socket_ifname()
    if named:
        var, name = named
        match = [i for i in mine if i.name == name] or [i for i in mine if i.name.startswith(name)]
        if not match or match[0].is_loopback:
            raise LaunchError(f"{var}={name} should name a non-loopback IPv4 interface of rank 0's host "
                              f"{socket.gethostname()}; got interfaces {_describe_ifaces(mine)}. {_HINT}")
        return [(match[0].address, str(match[0].network))]
    resolved = _env.host_address()
    for_mpi = [name for _, name in mpi_ifnames()]
    ranked = sorted(mine, key=lambda i: (i.name not in for_mpi, i.address != resolved))
    shared = [i for i in ranked if _env.pick_shared_address([i], others) is not None]
    if not shared:
        raise LaunchError(f"expected an IPv4 address of rank 0's host {socket.gethostname()} on a subnet all "
                          f"{len(others) + 1} hosts share (its name resolves to {resolved}); got rank 0: "
                          f"{_describe_ifaces(mine)}, other hosts: "
                          f"{'; '.join(_describe_ifaces(o) for o in others)}. {_HINT}")
    if resolved != shared[0].address:
        log.info("rendezvous on %s (%s) unless another host cannot reach it, not %s that the host name resolves "
                 "to", shared[0].address, shared[0].name, resolved)
    return [(i.address, str(i.network)) for i in shared]


def _reached(endpoints: list[tuple[str, int]], seconds: float = PROBE_SECONDS) -> list[bool]:
    socks, ok = [], [False] * len(endpoints)
    pending: dict[socket.socket, int] = {}
    try:
        for k, (address, port) in enumerate(endpoints):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.setblocking(False)
            if sock.connect_ex((address, port)) in (0, errno.EINPROGRESS):
                pending[sock] = k
        deadline = time.monotonic() + seconds
        while pending and time.monotonic() < deadline:
            _, done, _ = select.select([], list(pending), [], max(0.0, deadline - time.monotonic()))
            for sock in done:
                ok[pending.pop(sock)] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
    finally:
        for sock in socks:
            sock.close()
    return ok


def _first_reached(candidates: list[tuple[str, str]], reached: list[list[bool]]) -> tuple[str, str, str]:
    for k, (address, network) in enumerate(candidates):
        if all(host[k] for host in reached):
            if k:
                log.info("rendezvous on %s: %s not reached from every host within %gs", address,
                         ", ".join(a for a, _ in candidates[:k]), PROBE_SECONDS)
            return address, network, ""
    counts = ", ".join(f"{a}: {sum(h[k] for h in reached)}" for k, (a, _) in enumerate(candidates))
    return "", "", (f"expected an address of rank 0's host {socket.gethostname()} that every other host connects "
                    f"to; got none that all {len(reached)} reached within {PROBE_SECONDS:g}s (hosts that reached "
                    f"each: {counts}). {_HINT}")


@contextlib.contextmanager
def _draining(listeners: list[socket.socket]) -> Iterator[None]:
    """Accept and drop the probes' connections, so thousands of hosts do not overflow a listen backlog."""
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            for sock in select.select(listeners, [], [], 0.05)[0]:
                with contextlib.suppress(OSError):
                    sock.accept()[0].close()

    thread = threading.Thread(target=drain, name="mpignn-probe", daemon=True)
    if listeners:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if listeners:
            thread.join()
        for sock in listeners:
            sock.close()


def _describe_ifaces(ifaces: list[_env.Interface]) -> str:
    return ", ".join(map(str, ifaces)) or "none"
