"""Network interfaces that are not a host's physical NICs, told by name or by address.

Linux, Docker, Kubernetes CNIs and libvirt name their virtual interfaces in fixed ways: the
loopback ``lo``, bridges (``docker0``, ``br-<id>``, ``virbr0``, ``cni0``, ``podman0``), veth
pairs (``veth<id>``), overlays (``flannel.1``, ``vxlan.calico``, ``cilium_host``, ``weave``)
and tunnels (``tunl0``, ``gre0``, ``tun0``). Inside a container the interface is often just
``eth0``: the container end of a veth pair whose address is on the bridge's network, for
Docker's default bridge ``172.17.0.0/16`` (``bip``'s default, Docker documentation "Networking
overview" and ``docker network inspect bridge``). NCCL may carry inter-node traffic over any
of them when they are named in its socket interfaces or in a topology file's ``<net>``.
"""

from __future__ import annotations

import ipaddress
import re

_KINDS = (
    ("the loopback", re.compile(r"^lo$")),
    ("a veth pair (a container's link to a bridge)", re.compile(r"^veth\w*$")),
    ("a container or VM bridge", re.compile(
        r"^(?:docker\d*|br-\w+|virbr\d+|cni\d*|podman\d+|nerdctl\d+|lxcbr\d+|kube-\w+)$")),
    ("an overlay network", re.compile(
        r"^(?:flannel[.\w]*|cali\w+|vxlan[.\w-]*|genev_sys_\w+|weave|cilium_\w+)$")),
    ("a tunnel", re.compile(r"^(?:tunl\d+|ip6tnl\d+|ip_vti\d+|sit\d+|gre\d+|tun\d+|tap\w+)$")),
)
DOCKER_DEFAULT_BRIDGE = ipaddress.ip_network("172.17.0.0/16")


def virtual_kind(name: str, address: str | None = None) -> str | None:
    """What kind of virtual interface ``name`` (with ``address``, when known) is, in words;
    ``None`` for an interface that may be a physical NIC."""
    kind = next((kind for kind, pattern in _KINDS if pattern.match(name)), None)
    if kind is not None:
        return kind
    try:
        ip = ipaddress.ip_address(address.strip("[]")) if address else None
    except ValueError:
        return None
    if ip is not None and ip in DOCKER_DEFAULT_BRIDGE:
        return (f"an address on Docker's default bridge network ({DOCKER_DEFAULT_BRIDGE}): a "
                "container's end of a veth pair behind docker0")
    return None


def is_virtual(name: str, address: str | None = None) -> bool:
    """True for an interface :func:`virtual_kind` names."""
    return virtual_kind(name, address) is not None
