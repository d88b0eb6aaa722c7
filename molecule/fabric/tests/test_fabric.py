"""What the fabric role checked, checked again with the nodes' own tools after converge: every
rail has carrier and MTU 9000 on both ends, a full 9000-byte frame crosses each rail both ways
without fragmenting, and each peer's rail address routes through that rail's own netdev."""

from __future__ import annotations

RAILS = ("enp1s0f0np0", "enP2p1s0f0np0")
MTU = 9000
PAYLOAD = MTU - 28  # IPv4 and ICMP headers


def rail_ip(node, netdev: str) -> str:
    out = node.check_output(f"ip -4 -o addr show dev {netdev} scope global")
    return out.split()[3].split("/")[0]


def test_rails_up_with_jumbo_mtu(nodes) -> None:
    for node in nodes:
        for rail in RAILS:
            assert node.file(f"/sys/class/net/{rail}/carrier").content_string.strip() == "1"
            assert node.file(f"/sys/class/net/{rail}/mtu").content_string.strip() == str(MTU)


def test_full_frames_cross_every_rail_both_ways(nodes) -> None:
    for node in nodes:
        for peer in nodes:
            if peer is node:
                continue
            for rail in RAILS:
                target = rail_ip(peer, rail)
                cmd = f"ping -c 1 -W 2 -M do -s {PAYLOAD} -I {rail} {target}"
                assert node.run(cmd).rc == 0, cmd


def test_frames_above_the_mtu_are_refused_not_fragmented(nodes) -> None:
    node, peer = nodes[0], nodes[1]
    target = rail_ip(peer, RAILS[0])
    result = node.run(f"ping -c 1 -W 2 -M do -s {PAYLOAD + 1} -I {RAILS[0]} {target}")
    assert result.rc != 0


def test_peer_addresses_route_through_their_own_rail(nodes) -> None:
    for node in nodes:
        for peer in nodes:
            if peer is node:
                continue
            for rail in RAILS:
                route = node.check_output(f"ip -o route get {rail_ip(peer, rail)}")
                assert f" dev {rail} " in f"{route} ", route
