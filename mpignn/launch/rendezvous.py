"""Where the ranks meet for torch.distributed: `rendezvous_endpoint` picks rank 0's address the other hosts
reach (never loopback across hosts) and this rank's interface on its subnet, agreed over MPI.

Imports the stdlib, mpi4py (lazily), `mpignn.env` and `mpignn.errors`; never torch. Its caller is
`mpignn.launch.process_group`, one layer above `mpignn.mpi` (which does not import this module).
"""
from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Any

from mpignn import env as _env
from mpignn.errors import LaunchError, mark_agreed

__all__ = ["rendezvous_endpoint"]

log = logging.getLogger(__name__)


def rendezvous_endpoint(comm: Any) -> tuple[str, str | None]:
    """Collective over `comm`: every rank must call it, in the same order. Rank 0's address the other hosts
    reach (MASTER_ADDR), the same on every rank, and this rank's own interface on that address's subnet (for
    GLOO_SOCKET_IFNAME; None on one host). No port: the store goes over MPI (`mpignn.launch.mpi_store`).

    The address: a MASTER_ADDR set on rank 0;
    else on one host, what the host name resolves to; across hosts never a loopback address (a host name
    mapped to 127.0.1.1 in /etc/hosts is common), but the IPv4 address of the interface named by
    MPIGNN_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, else one of rank 0's addresses on a subnet
    every other host also has an address in (each host's first rank reports its interfaces).

    Raises:
        LaunchError: on every rank alike, when no such address exists; the message names the fix.
    """
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    leader = local.rank == 0
    local.Free()
    reports = comm.gather(_env.ipv4_interfaces() if leader and comm.rank != 0 else None, root=0)
    answer: tuple[str, str, str] = ("", "", "")
    if comm.rank == 0:
        try:
            address, network = _choose_address([r for r in reports[1:] if r is not None])
            answer = (address, network, "")
        except LaunchError as exc:
            answer = ("", "", str(exc))
    address, network, problem = comm.bcast(answer, root=0)
    if problem:
        raise mark_agreed(LaunchError(problem))
    ifname = None
    if network:  # the gloo transport binds what the host name resolves to unless told: tell it the same subnet
        own = [i for i in _env.ipv4_interfaces() if ipaddress.ip_address(i.address) in ipaddress.ip_network(network)]
        ifname = own[0].name if own else None
    return address, ifname


def _choose_address(others: list[list[_env.Interface]]) -> tuple[str, str]:
    """Rank 0's side of `rendezvous_endpoint`: (address, its subnet or "" on one host or a MASTER_ADDR set by
    the user); `others` holds the interfaces of each other host."""
    user = _env.user_master_addr()
    if user:
        return user, ""
    if not others:
        return _env.host_address(), ""
    mine = _env.ipv4_interfaces()
    hint = ("HINT: set MPIGNN_SOCKET_IFNAME to the interface the hosts reach each other on (see `ip -4 addr`), "
            "or MASTER_ADDR to rank 0's address on it")
    named = _env.socket_ifname()
    if named:
        var, name = named
        match = [i for i in mine if i.name == name] or [i for i in mine if i.name.startswith(name)]
        if not match or match[0].is_loopback:
            raise LaunchError(f"{var}={name} should name a non-loopback IPv4 interface of rank 0's host "
                              f"{socket.gethostname()}; got interfaces {_describe_ifaces(mine)}. {hint}")
        return match[0].address, str(match[0].network)
    resolved = _env.host_address()
    shared = _env.pick_shared_address(sorted(mine, key=lambda i: i.address != resolved), others)
    if shared is None:
        raise LaunchError(f"expected an IPv4 address of rank 0's host {socket.gethostname()} on a subnet all "
                          f"{len(others) + 1} hosts share (its name resolves to {resolved}); got rank 0: "
                          f"{_describe_ifaces(mine)}, other hosts: "
                          f"{'; '.join(_describe_ifaces(o) for o in others)}. {hint}")
    if resolved != shared.address:
        log.info("rendezvous on %s (%s), not %s that the host name resolves to", shared.address, shared.name,
                 resolved)
    return shared.address, str(shared.network)


def _describe_ifaces(ifaces: list[_env.Interface]) -> str:
    return ", ".join(f"{i.name} {i.address}/{i.prefixlen}" for i in ifaces) or "none"
