"""The all-gather and reduce-scatter kernels under TRITON_INTERPRET=1: one CPU process per
rank over shared memory (as in test_kernels_interpret), against float64 references.

All-gather: every rank's output is the concatenation of the inputs in rank order, bit for
bit (``ag_push`` sends a 16-bit -0.0 as +0.0). Reduce-scatter: rank ``r``'s output is bitwise the
fp32 sum of the ranks' chunk ``r`` in rank order, rounded once (so whichever rank holds a
chunk, it is the same), and close to the float64 sum.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from interpret_ranks import spawn_ranks
from kernel_cases import check_all_gather, check_all_reduce, check_reduce_scatter, collective_input
from ranks_collectives_interpret import _rank_main

# Never import triton here: the spawned ranks must import it with TRITON_INTERPRET set.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="triton is not installed")

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
KERNELS = ("ag_push", "ag_bw", "rs_pull", "rs_push")


def run_ranks(world: int, cases, skip=()):
    """Each rank's (outputs, error flag), one interpreted process per rank."""
    return spawn_ranks(_rank_main, world, cases, skip)


def check(world: int, cases, results) -> None:
    for call, (algo, dtype, n, mode) in enumerate(cases):
        name = algo[0] if isinstance(algo, tuple) else algo
        label = f"call {call}: {name} {dtype} n={n} {mode} world={world}"
        xs = [collective_input(name, r, call, n, dtype, world) for r in range(world)]
        outs = [results[r][0][call] for r in range(world)]
        if name.startswith("ag_"):
            check_all_gather(label, name, xs, outs)
        elif name.startswith("rs_"):
            check_reduce_scatter(label, xs, outs, bf16_toward_zero=True)
        else:  # an all-reduce between the collectives
            check_all_reduce(f"call {call}: {name} world={world}", world, call, n, dtype, outs)


def _modes(algo: str) -> tuple[str, ...]:
    return ("out", "inplace", "ws", "ws-in") if algo.startswith("ag_") else \
        ("out", "inplace", "ws", "ws-inplace")


@pytest.mark.parametrize("algo", KERNELS)
def test_collectives_match_float64(algo):
    # odd sizes, every dtype, every placement of input and output
    modes = _modes(algo)
    cases = [(algo, dt, n, modes[(i + j) % 4]) for i, dt in enumerate(DTYPES)
             for j, n in enumerate((1, 7, 130, 1001))]
    results = run_ranks(2, cases)
    assert all(err == 0 for _, err in results)
    check(2, cases, results)


@pytest.mark.parametrize("world", [3, 4])
def test_collectives_at_world_sizes_three_and_four(world):
    cases = [(a, dt, n, _modes(a)[k]) for a in KERNELS
             for dt, n, k in ((torch.bfloat16, 7, 1), (torch.float32, 130, 2))]
    if world == 3:
        # 3 * 5461 fp32 fill the data region but are two pieces of 5456 a rank: a
        # comm.empty input or output of that size goes through a copy
        cases += [("ag_bw", torch.float32, 5461, "ws"), ("rs_pull", torch.float32, 5461, "ws"),
                  ("rs_pull", torch.float32, 5461, "ws-inplace")]
    results = run_ranks(world, cases)
    assert all(err == 0 for _, err in results)
    check(world, cases, results)


def test_collectives_at_world_size_eight():
    cases = [("ag_push", torch.float16, 5, "inplace"), ("ag_bw", torch.bfloat16, 9, "ws"),
             ("rs_pull", torch.float32, 3, "out"), ("rs_push", torch.bfloat16, 17, "inplace")]
    results = run_ranks(8, cases)
    assert all(err == 0 for _, err in results)
    check(8, cases, results)


def test_ag_push_rotation_shared_with_one_shot_push():
    # Big, then small, then odd, with the all-reduce's Lamport calls in between: both
    # rotate the same three receive buffers; stale data in an uncleared slot would show.
    sizes = [4000, 5, 4000, 31, 2, 4000, 1, 700, 3000, 9]
    cases = [("ag_push", DTYPES[i % 3], n, ("out", "inplace", "ws")[i % 3])
             for i, n in enumerate(sizes)]
    for at in (9, 6, 3, 1):
        cases.insert(at, ("one_shot_push", DTYPES[at % 3], 4000 - at, at % 2 == 0))
    results = run_ranks(2, cases)
    assert all(err == 0 for _, err in results)
    check(2, cases, results)


def test_messages_larger_than_a_region_go_in_pieces():
    # The data region holds 16384 fp32 and a receive slot 4096: 9000 fp32 a rank are two
    # pieces (three for ag_push); rs_push also in rounds of 3 tiles. Mixed back to back.
    cases = [("ag_bw", torch.float32, 9000, "out"), ("rs_pull", torch.float32, 9000, "inplace"),
             ("ag_push", torch.float32, 9000, "inplace"), ("ag_bw", torch.float32, 9000, "ws-in"),
             (("rs_push", {"round_tiles": 3}), torch.float32, 9000, "out"),
             ("rs_pull", torch.bfloat16, 20000, "out")]
    results = run_ranks(2, cases)
    assert all(err == 0 for _, err in results)
    check(2, cases, results)


@pytest.mark.parametrize("algo", ["ag_push", "rs_push"])
def test_spin_timeout_names_the_missing_peer(algo):
    # Rank 1 skips the second call: rank 0 must give up and record peer 1, not hang. The
    # Lamport poll and the block-wise barrier (ag_bw and rs_pull wait in the same barrier)
    # each cost the interpreter's whole spin budget, so two kernels stand for all four.
    cases = [(algo, torch.float32, 64, "out"), (algo, torch.float32, 64, "out")]
    results = run_ranks(2, cases, skip=[(1, 1)])
    assert results[0][1] == 2  # 1 + the stuck peer's rank
    assert results[1][1] == 0
