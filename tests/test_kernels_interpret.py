"""The Triton kernels under TRITON_INTERPRET=1: one CPU process per rank over shared memory.

Each rank's workspace is a shared-memory CPU tensor mapped in every process, so the
pointer tables, signal pads and remote loads/stores are real; ranks run concurrently,
so barriers and Lamport polls really wait for each other.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from interpret_ranks import spawn_ranks
from kernel_cases import DTYPES, check_all_reduce, check_fused
from ranks_interpret import _rank_main

# Never import triton here: the spawned ranks must import it with TRITON_INTERPRET set.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="triton is not installed")

def run_ranks(world: int, cases, skip=()):
    """Each rank's (outputs, error flag), one interpreted process per rank."""
    return spawn_ranks(_rank_main, world, cases, skip)


def check(world, cases, results):
    for call, (algo, dtype, n, _) in enumerate(cases):
        outs = [results[r][0][call] for r in range(world)]
        if isinstance(n, tuple):  # fused: each output is torch.cat([normed, new_residual])
            check_fused(f"{algo}", world, call, n, dtype, [(o[:n[0]], o[n[0]:]) for o in outs])
        else:
            check_all_reduce(f"{algo}", world, call, n, dtype, outs)


@pytest.mark.parametrize("algo", ["one_shot", "two_shot", "two_shot_push"])
def test_pull_kernels_match_float64(algo):
    cases = [(algo, dt, n, inplace) for dt in DTYPES for n, inplace in
             ((1, True), (7, False), (100, True), (4097, False))]
    results = run_ranks(2, cases)
    assert all(err == 0 for _, err in results)
    check(2, cases, results)


@pytest.mark.parametrize("world", [2, 3])
def test_two_shot_push_in_rounds(world):
    # 4 programs of 64-element tiles: 4097 elements give each program 8-9 tiles (5-6 at
    # world 3), taken in rounds of 1, 3 (a short last round) and 16 (one round); the
    # barriers of every round pair up across ranks, and the result area is read only
    # after the peer wrote it
    cases = [(("two_shot_push", {"round_tiles": r}), dt, n, inplace)
             for r in (1, 3, 16) for dt, n, inplace in
             ((torch.float32, 4097, False), (torch.bfloat16, 700, True), (torch.float16, 5, False))]
    results = run_ranks(world, cases)
    assert all(err == 0 for _, err in results)
    check(world, cases, results)


@pytest.mark.parametrize("world", [2, 3])
def test_kernels_on_workspace_tensors(world):
    # comm.empty tensors: reduced in place (two_shot_push then skips its final copy, the
    # peers' shards land in place), out of place (into an ordinary tensor), one rank in
    # place on the workspace and the others on ordinary tensors; 16384 fp32 fill the
    # 64 KiB data region: more than one two_shot_push piece at world 3, whose results
    # must not trample the output
    cases = [(a, dt, n, mode) for a in ("two_shot_push", "two_shot", "one_shot")
             for dt, n, mode in ((torch.bfloat16, 4097, "ws"), (torch.float32, 999, "ws-from"),
                                 (torch.float16, 130, "ws-mixed"))]
    cases += [(("two_shot_push", {"round_tiles": 2}), torch.bfloat16, 1001, "ws"),
              ("two_shot_push", torch.float32, 16384, "ws"),
              ("two_shot_push", torch.float32, 16384, "ws-from")]
    results = run_ranks(world, cases)
    assert all(err == 0 for _, err in results)
    check(world, cases, results)


def test_pull_kernels_world_size_three_and_chunking():
    # 20000 fp32 = 80 KB > the 64 KiB data region: reduced in two pieces. Mixed algorithms
    # back to back: no algorithm may trample another's workspace data between calls.
    cases = [("two_shot", torch.float32, 20000, False), ("one_shot", torch.bfloat16, 333, True),
             ("two_shot", torch.float16, 47, True), ("two_shot_push", torch.float32, 20000, True),
             ("two_shot_push", torch.bfloat16, 1001, False), ("two_shot", torch.float32, 999, True),
             ("two_shot_push", torch.float16, 5, True)]
    results = run_ranks(3, cases)
    assert all(err == 0 for _, err in results)
    check(3, cases, results)


def test_one_shot_push_rotation_and_clear():
    # Big, then small, then odd: stale data in an uncleared slot would be summed.
    sizes = [4000, 5, 4000, 31, 2, 4000, 1, 700]
    cases = [("one_shot_push", DTYPES[i % 3], n, i % 2 == 0) for i, n in enumerate(sizes)]
    results = run_ranks(2, cases)
    assert all(err == 0 for _, err in results)
    check(2, cases, results)


def test_spin_timeout_names_the_missing_peer():
    # Rank 1 skips the call: rank 0 must give up and record peer 1, not hang.
    cases = [("one_shot", torch.float32, 64, False)]
    results = run_ranks(2, cases, skip=[(1, 0)])
    assert results[0][1] == 2  # 1 + the stuck peer's rank


@pytest.mark.parametrize("world", [4, 8])
def test_every_kernel_at_larger_world_sizes(world):
    # The 4- and 8-GPU machines are withheld; the kernels must still take any world size.
    cases = [(a, torch.bfloat16, n, n % 2 == 1) for a in
             ("one_shot_push", "one_shot", "two_shot", "two_shot_push") for n in (3, 130)]
    results = run_ranks(world, cases)
    assert all(err == 0 for _, err in results)
    check(world, cases, results)


@pytest.mark.parametrize("world", [2, 3])
def test_fused_residual_rmsnorm_kernels(world):
    # hidden sizes that are and are not powers of two; rows fewer and more than programs;
    # 200 x 96 fp32 is reduced in pieces: 170 rows fit the one_shot data region, 84 the
    # two_shot scratch (16384 elements / (2 * world * 96), in whole rows per owner).
    cases = [(a, dt, shape, False) for a in ("one_shot_push", "one_shot", "two_shot_push")
             for dt, shape in ((torch.bfloat16, (1, 64)), (torch.float16, (5, 96)),
                               (torch.float32, (200, 96)))
             if not (a == "one_shot_push" and shape == (200, 96))]
    # one_shot_push with rows shared by 2 and 4 programs (a 96-wide row: parts of 32, the
    # last part half empty), more items than programs
    cases += [("one_shot_push", dt, shape, split) for dt, shape, split in
              ((torch.bfloat16, (1, 64), 4), (torch.float32, (5, 96), 4),
               (torch.float16, (3, 1000), 2))]
    results = run_ranks(world, cases)
    assert all(err == 0 for _, err in results)
    check(world, cases, results)
