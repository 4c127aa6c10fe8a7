"""The Docker host's firewall rule that keeps a sandbox on porter's internal network away from the host's listeners.

Docker's `--internal` network has no route out, but the host keeps an address on the network's bridge (the
gateway), and whatever listens on the host's 0.0.0.0 (a Ray head on 6379, a notebook, a database) answers there.
One rule at the top of the host's INPUT chain refuses every packet that arrives from that bridge and is not part
of a connection the host opened: the checks' connections to the server (host to sandbox) and their answers pass;
a connection the sandbox opens to any of the host's addresses (the gateway, the host's other addresses, TCP or
UDP, even crafted raw packets, since the host's own netfilter judges them) is refused. The rule lives on the
host, so nothing in the sandbox can lift it. Tasks with `sandbox.reach_host` use another network, without it.

The rule is put in place through a helper container of the sandbox's image that shares the host's network
namespace with NET_ADMIN and runs the host's own `iptables` (a chroot into the host's root, mounted read-only
with /run writable for iptables' lock), so it lands in the backend (nft or legacy) the Docker host uses, also
when porter is not root or the engine is remote (`sandbox.docker_host`). Idempotent (`-C` before `-I`) and
checked at every sandbox start, since a reboot clears it. Does not cover the route out (docker.py drops the
default route) nor the bridge and host networks, which reach the host by design.
"""

from __future__ import annotations

import docker
import docker.errors
from docker.types import Mount

from porter.sandbox.docker_options import image_name, internal_network
from porter.sandbox.interface import SandboxError
from porter.task import Task

RULE_COMMENT = "porter-no-host-listeners"
_SCRIPT = f"""
rule="INPUT -i $1 -m conntrack ! --ctstate ESTABLISHED,RELATED -m comment --comment {RULE_COMMENT} -j REJECT"
command -v iptables >/dev/null 2>&1 || {{ echo "the Docker host has no iptables" >&2; exit 3; }}
iptables -w 30 -C $rule 2>/dev/null || iptables -w 30 -I $rule || exit 4
if command -v ip6tables >/dev/null 2>&1 && ip6tables -w 30 -S INPUT >/dev/null 2>&1; then
  ip6tables -w 30 -C $rule 2>/dev/null || ip6tables -w 30 -I $rule || exit 5
fi
"""
_HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_closed: set[tuple[str, str]] = set()  # (engine, network id) whose rule this process has checked


def close_host_listeners(client: docker.DockerClient, task: Task, labels: dict[str, str]) -> None:
    """Make sure the host refuses connections that the task's sandbox (network none, no `reach_host`) opens to it."""
    if task.sandbox.network != "none" or task.sandbox.reach_host:
        return
    network_name = internal_network(task)
    try:
        network = client.networks.get(network_name)
    except docker.errors.NotFound:
        raise SandboxError(
            f"the network {network_name} is gone: remove the run's stopped sandbox, then start again"
        ) from None
    # The network's host interface: its configured name, else docker's br-<id prefix>.
    bridge = network.attrs.get("Options", {}).get("com.docker.network.bridge.name") or f"br-{network.id[:12]}"
    if (client.api.base_url, network.id) in _closed:
        return
    mounts = [Mount("/host", "/", type="bind", read_only=True), Mount("/host/run", "/run", type="bind")]
    try:
        client.containers.run(
            image_name(task),
            entrypoint=["chroot", "/host", "sh", "-c", _SCRIPT, "porter-firewall", bridge],
            environment={"PATH": _HOST_PATH},
            network_mode="host",
            cap_add=["NET_ADMIN", "NET_RAW"],
            mounts=mounts,
            remove=True,
            labels=labels,
        )
    except (docker.errors.ContainerError, docker.errors.APIError) as exc:
        stderr = getattr(exc, "stderr", None)
        said = stderr.decode(errors="replace").strip() if stderr else str(exc)
        raise SandboxError(
            f"cannot close the network {network_name} to the host's own listeners (iptables on the Docker host, "
            f"rule on {bridge}): {said}; a sandbox there could reach every service on the host's 0.0.0.0. Fix the "
            "host's iptables, or set sandbox.reach_host: true to run without the rule"
        ) from None
    _closed.add((client.api.base_url, network.id))
