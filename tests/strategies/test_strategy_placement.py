"""Least-loaded placement with deterministic ties."""
import pytest

from autodist.strategies._placement import LoadBalancer, largest_first


def test_place_goes_to_the_least_loaded_server_lower_index_on_ties():
    balancer = LoadBalancer(3)
    assert [balancer.place(10) for _ in range(3)] == [0, 1, 2]
    assert balancer.place(5) == 0
    assert balancer.place(1) == 1
    assert balancer.loads == [15, 11, 10]


def test_least_loaded_and_charge():
    balancer = LoadBalancer(4)
    balancer.place(100)   # server 0
    taken = balancer.least_loaded(3)
    assert taken == [1, 2, 3]
    for server in taken:
        balancer.charge(server, 50)
    assert balancer.loads == [100, 50, 50, 50]
    assert balancer.least_loaded(9) == [1, 2, 3, 0], "at most m servers, least loaded first"


def test_largest_first_keeps_index_order_for_equal_sizes():
    assert largest_first([10, 30, 20, 20, 30]) == [1, 4, 2, 3, 0]


def test_no_servers_is_refused():
    with pytest.raises(ValueError):
        LoadBalancer(0)
