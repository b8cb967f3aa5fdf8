"""End-to-end: a tensor-parallel Llama-style decoder with dist.all_reduce vs commrt.

    torchrun --nproc-per-node 2 benchmarks/bench_tp_decode.py [--shape 8b|70b]

Random bf16 weights, the Llama-3-8B shape (hidden 4096, intermediate 14336, 32 heads,
8 KV heads, 32 layers) or a 70B-shaped variant (hidden 8192, intermediate 28672, 64
heads, 8 KV heads, fewer layers). Attention and MLP are split over the group, so each
layer ends its attention and its MLP with an all-reduce. A decode step (one token per
sequence against a KV cache of ``--ctx`` tokens, its own k and v written into the cache in
place, query heads folded per KV head) runs in a CUDA graph at each batch; a
prefill of ``--prefill`` tokens runs in a CUDA graph too. Both all-reduces must give
logits as accurate as dist.all_reduce's against a float32 copy of the model (same
weights) before anything is timed: a fused kernel rounds once where the unfused ops
round twice, so over 32 random layers the bf16 paths drift apart by a few percent while
each stays as close to float32 as the others.

``--dtensor-batches``: the same 8B-shaped decoder written as plain ``nn.Module`` layers
(Hugging Face names) and parallelised with ``parallelize_module`` (colwise q/k/v and
gate/up, rowwise o and down), run unmodified: unpatched, under ``commrt.patch()``, and
compiled without and with the pass ``commrt.patch()`` installs (its own weights: compared
with its unpatched self, bitwise at world size 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

SHAPES = {
    "8b": dict(hidden=4096, inter=14336, heads=32, kv_heads=8, layers=32, vocab=128256),
    "70b": dict(hidden=8192, inter=28672, heads=64, kv_heads=8, layers=10, vocab=128256),
}
HEAD_DIM = 128
NO_AR = "no all-reduce"


class TPDecoder:
    """The per-rank shard of the model; ``reduce(x)`` is the all-reduce under test."""

    def __init__(self, shape: dict, world: int, device, seed: int = 0,
                 dtype=torch.bfloat16):
        g = torch.Generator(device=device).manual_seed(seed)
        h, tp = shape["hidden"], world
        self.heads, self.kv = shape["heads"] // tp, max(1, shape["kv_heads"] // tp)

        def w(*dims):
            return (torch.randn(*dims, generator=g, device=device) * 0.02).to(torch.bfloat16
                                                                               ).to(dtype)

        self.layers = []
        for _ in range(shape["layers"]):
            self.layers.append(dict(
                ln1=torch.ones(h, device=device, dtype=dtype),
                ln2=torch.ones(h, device=device, dtype=dtype),
                qkv=w((self.heads + 2 * self.kv) * HEAD_DIM, h),
                o=w(h, self.heads * HEAD_DIM),
                gate_up=w(2 * shape["inter"] // tp, h),
                down=w(h, shape["inter"] // tp),
            ))
        self.norm = torch.ones(h, device=device, dtype=dtype)
        self.lm_head = w(shape["vocab"] // tp, h)
        self.reduce = None
        self.fused = None  # (x, residual, weight) -> (normed, new_residual), or None

    def attention(self, x, layer, cache):
        b, s, _ = x.shape
        qkv = F.linear(x, layer["qkv"]).view(b, s, self.heads + 2 * self.kv, HEAD_DIM)
        q, k, v = qkv.split([self.heads, self.kv, self.kv], dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if cache is None:  # prefill: causal over the prompt
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # decode, as serving engines do it: this token's k and v written into the
            # cache's last slot in place; the query heads that share a KV head are folded
            # into the query length, so no backend needs to repeat K and V
            cache[0][:, :, -1:].copy_(k)
            cache[1][:, :, -1:].copy_(v)
            g = self.heads // self.kv
            o = F.scaled_dot_product_attention(q.reshape(b, self.kv, g * s, HEAD_DIM),
                                               cache[0], cache[1])
            o = o.reshape(b, self.heads, s, HEAD_DIM)
        return F.linear(o.transpose(1, 2).reshape(b, s, -1), layer["o"])

    def forward(self, x, caches=None):
        if self.fused is not None:
            return self.forward_fused(x, caches)
        for i, layer in enumerate(self.layers):
            a = self.attention(F.rms_norm(x, (x.shape[-1],), layer["ln1"], 1e-5), layer,
                               caches[i] if caches else None)
            self.reduce(a)
            x = x + a
            gu = F.linear(F.rms_norm(x, (x.shape[-1],), layer["ln2"], 1e-5), layer["gate_up"])
            gate, up = gu.chunk(2, dim=-1)
            m = F.linear(F.silu(gate) * up, layer["down"])
            self.reduce(m)
            x = x + m
        return F.linear(F.rms_norm(x, (x.shape[-1],), self.norm, 1e-5), self.lm_head)


    def forward_fused(self, x, caches=None):
        """The same model with each all-reduce fused with the add and the next norm."""
        h = F.rms_norm(x, (x.shape[-1],), self.layers[0]["ln1"], 1e-5)
        for i, layer in enumerate(self.layers):
            a = self.attention(h, layer, caches[i] if caches else None)
            h, x = self.fused(a, x, layer["ln2"])
            gu = F.linear(h, layer["gate_up"])
            gate, up = gu.chunk(2, dim=-1)
            m = F.linear(F.silu(gate) * up, layer["down"])
            nxt = self.layers[i + 1]["ln1"] if i + 1 < len(self.layers) else self.norm
            h, x = self.fused(m, x, nxt)
        return F.linear(h, self.lm_head)


class _Attention(torch.nn.Module):
    def __init__(self, h: int, heads: int, kv: int, dtype):
        super().__init__()
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False, dtype=dtype)  # noqa: E731
        self.q_proj, self.o_proj = lin(h, heads * HEAD_DIM), lin(heads * HEAD_DIM, h)
        self.k_proj, self.v_proj = lin(h, kv * HEAD_DIM), lin(h, kv * HEAD_DIM)

    def forward(self, x, cache):
        b, s, _ = x.shape
        q, k, v = (p(x).view(b, s, -1, HEAD_DIM).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))  # this rank's heads
        cache[0][:, :, -1:].copy_(k)
        cache[1][:, :, -1:].copy_(v)
        kv, g = k.shape[1], q.shape[1] // k.shape[1]
        o = F.scaled_dot_product_attention(q.reshape(b, kv, g * s, HEAD_DIM), cache[0],
                                           cache[1]).reshape(b, -1, s, HEAD_DIM)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, -1))


class _Layer(torch.nn.Module):
    def __init__(self, shape: dict, dtype):
        super().__init__()
        h, inter = shape["hidden"], shape["inter"]
        self.input_layernorm = torch.nn.RMSNorm(h, eps=1e-5, dtype=dtype)
        self.self_attn = _Attention(h, shape["heads"], shape["kv_heads"], dtype)
        self.post_attention_layernorm = torch.nn.RMSNorm(h, eps=1e-5, dtype=dtype)
        self.gate_proj, self.up_proj, self.down_proj = (
            torch.nn.Linear(i, o, bias=False, dtype=dtype)
            for i, o in ((h, inter), (h, inter), (inter, h)))

    def forward(self, x, cache):
        x = x + self.self_attn(self.input_layernorm(x), cache)
        m = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))


class DTensorDecoder(torch.nn.Module):
    """The decoder as model code writes it; ``parallelize_module`` makes it TP."""

    def __init__(self, shape: dict, dtype=torch.bfloat16):
        super().__init__()
        self.layers = torch.nn.ModuleList(_Layer(shape, dtype) for _ in range(shape["layers"]))
        self.norm = torch.nn.RMSNorm(shape["hidden"], eps=1e-5, dtype=dtype)
        self.lm_head = torch.nn.Linear(shape["hidden"], shape["vocab"], bias=False, dtype=dtype)

    def forward(self, x, caches):
        for layer, cache in zip(self.layers, caches, strict=True):
            x = layer(x, cache)
        return self.lm_head(self.norm(x))


def dtensor_decoder(shape: dict, dev) -> DTensorDecoder:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    with torch.device(dev):
        model = DTensorDecoder(shape)
    col, row = ColwiseParallel(), RowwiseParallel()
    plan = {"lm_head": col}
    for i in range(shape["layers"]):
        plan.update({f"layers.{i}.self_attn.{p}_proj": col for p in "qkv"})
        plan.update({f"layers.{i}.{p}_proj": col for p in ("gate", "up")})
        plan.update({f"layers.{i}.self_attn.o_proj": row, f"layers.{i}.down_proj": row})
    mesh = init_device_mesh(dev.type, (dist.get_world_size(),))
    return parallelize_module(model, mesh, plan)


DTENSOR_ROWS = ("dtensor", "dtensor patched", "dtensor compiled", "dtensor compiled + pass")


def dtensor_rows(model: DTensorDecoder, x, caches) -> dict:
    """ms per decode step and the patched rows' largest logit difference to unpatched."""
    from commrt.patch import patched

    ms, diff, ref = {}, {}, None
    for name in DTENSOR_ROWS:
        torch._dynamo.reset()
        with patched() if name in DTENSOR_ROWS[1::2] else contextlib.nullcontext():
            fwd = torch.compile(model, fullgraph=True, dynamic=False) \
                if "compiled" in name else model
            logits = fwd(x, caches).float()
            ms[name] = graph_time(lambda: fwd(x, caches))  # noqa: B023
        if ref is None or name == "dtensor compiled":
            ref = logits
        diff[name] = float((logits - ref).abs().max())
    return {"ms": ms, "max_abs_diff_vs_unpatched": diff}


def graph_time(fn, replays: int = 20) -> float:
    """Median ms of one ``fn`` call captured in a CUDA graph (the slower rank's)."""
    from commrt.timing import agree_median, time_graph

    dev = torch.device("cuda", torch.cuda.current_device())
    return agree_median(time_graph(fn, dev, ops=1, replays=replays, group=dist.group.WORLD),
                        dist.group.WORLD, dev) / 1e3


def write_rows(args, comm, world: int, shape: dict, rows: list) -> None:
    """The rows so far as ``tp_decode_<shape>_<generation>_ws<N>.{json,md}`` (rank 0, after
    every row: a run cut short keeps what it measured)."""
    from commrt import bench

    os.makedirs(args.out_dir, exist_ok=True)
    cmd = f"torchrun --nproc-per-node {world} " + " ".join(sys.argv)
    m = bench.meta(comm, cmd)
    m.update(shape=args.shape, ctx=args.ctx, **shape)
    path = os.path.join(args.out_dir,
                        f"tp_decode_{args.shape}_{comm.profile.generation}_ws{world}"
                        f"{args.tag}.json")
    with open(path, "w") as f:
        json.dump({"meta": m, "results": rows}, f, indent=1)
    with open(path[:-5] + ".md", "w") as f:
        f.write(f"# TP={world} {args.shape} decoder on {m['device']}\n\n")
        f.write(f"- torch `{m['torch']}`, NCCL `{m['nccl']}`, date {m['date']}\n"
                f"- command: `{cmd}`\n- CUDA graph per step, median of 20 replays\n"
                "- no all-reduce: the same step with the all-reduces left out (wrong "
                "logits; for scale); µs a call: (step - that) / all-reduces a step\n\n")
        f.write("| phase | batch | dist ms | commrt ms | speedup | commrt algo | "
                "fused ms | fused speedup | fused tok/s | worst logits err vs fp32 | "
                "no all-reduce ms | µs a call: dist | µs a call: commrt |\n"
                "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
        for r in rows:
            f.write(f"| {r['phase']} | {r['batch']} | {r['ms']['dist.all_reduce']:.3f} | "
                    f"{r['ms']['commrt.all_reduce']:.3f} | {r['speedup']:.3f} | "
                    f"{r['commrt_algorithm']} | {r['ms']['commrt fused']:.3f} | "
                    f"{r['speedup_fused']:.3f} | "
                    f"{r['tokens_per_s']['commrt fused']:.0f} | "
                    f"{max(r['logits_rel_err_vs_fp32'].values()):.1e} | "
                    f"{r['ms'][NO_AR]:.3f} | {r['us_per_allreduce']['dist.all_reduce']:.1f} | "
                    f"{r['us_per_allreduce']['commrt.all_reduce']:.1f} |\n")
        compiled = [r for r in rows if "compiled" in r["ms"]]
        if compiled:
            f.write("\n`torch.compile` of the unmodified model (dist.all_reduce + separate "
                    "add and norm), without and with `commrt.fx` installed:\n\n"
                    "| batch | compiled ms | compiled + commrt.fx ms | over compiled | "
                    "over eager dist |\n|---:|---:|---:|---:|---:|\n")
            for r in compiled:
                f.write(f"| {r['batch']} | {r['ms']['compiled']:.3f} | "
                        f"{r['ms']['compiled + commrt.fx']:.3f} | "
                        f"{r['speedup_compiled_fx_over_compiled']:.3f} | "
                        f"{r['speedup_compiled_fx']:.3f} |\n")
        dtensor = [r for r in rows if "dtensor" in r]
        if dtensor:
            f.write("\nThe `parallelize_module` (DTensor) decoder, unmodified: unpatched, "
                    "under `commrt.patch()`, compiled, compiled under `commrt.patch()` "
                    "(its pass); speedups over the unpatched row of the same mode:\n\n"
                    "| batch | " + " | ".join(f"{k} ms" for k in DTENSOR_ROWS) +
                    " | patched speedup | compiled + pass speedup | max logit diff |\n"
                    "|---:|" + "---:|" * (len(DTENSOR_ROWS) + 3) + "\n")
            for r in dtensor:
                d = r["dtensor"]["ms"]
                f.write(f"| {r['batch']} | " + " | ".join(f"{d[k]:.3f}" for k in DTENSOR_ROWS)
                        + f" | {d['dtensor'] / d['dtensor patched']:.3f} | "
                        f"{d['dtensor compiled'] / d['dtensor compiled + pass']:.3f} | "
                        f"{max(r['dtensor']['max_abs_diff_vs_unpatched'].values()):.1e} |\n")
    print(f"wrote {path}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="8b", choices=list(SHAPES))
    p.add_argument("--batches", default="1,8,32,128")
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--prefill", type=int, default=2048, help="prefill tokens (0: no prefill)")
    p.add_argument("--compiled-batches", default="1,8",
                   help="decode batches that also run torch.compile(model) without and with "
                        "commrt.fx installed (compiling costs minutes)")
    p.add_argument("--dtensor-batches", default="1,8",
                   help="decode batches that also run the parallelize_module variant "
                        "unpatched, patched and compiled without and with the pass "
                        "('' for none)")
    p.add_argument("--out-dir", default="benchmarks/results")
    p.add_argument("--tag", default="", help="suffix for the result file names")
    args = p.parse_args()
    from commrt import bench

    comm, dev = bench.init_torchrun()
    world = dist.get_world_size()
    shape = SHAPES[args.shape]
    model = TPDecoder(shape, world, dev)
    ref_model = TPDecoder(shape, world, dev, dtype=torch.float32)
    ref_model.reduce = lambda t: dist.all_reduce(t)
    dtensor_batches = [b for b in args.dtensor_batches.split(",") if b]
    dt_model = dtensor_decoder(shape, dev) if dtensor_batches else None
    reducers = {"dist.all_reduce": (lambda t: dist.all_reduce(t), None),
                "commrt.all_reduce": (lambda t: comm.all_reduce(t), None),
                "commrt fused": (None, lambda a, r, w: comm.all_reduce_residual_rmsnorm(
                    a, r, w, 1e-5)),
                # for scale only (wrong logits, never checked): what the all-reduces cost
                NO_AR: (lambda t: None, None)}
    rows = []
    cases = [("decode", int(b)) for b in args.batches.split(",")]
    cases += [("prefill", 1)] if args.prefill else []
    for phase, batch in cases:
        g = torch.Generator(device=dev).manual_seed(batch)
        seq = 1 if phase == "decode" else args.prefill
        x = torch.randn(batch, seq, shape["hidden"], generator=g, device=dev).to(torch.bfloat16)
        caches = None
        if phase == "decode":
            caches = [tuple(torch.randn(batch, model.kv, args.ctx + 1, HEAD_DIM, generator=g,
                                        device=dev).to(torch.bfloat16) for _ in range(2))
                      for _ in model.layers]
        logits, ms = {}, {}
        for name, (red, fused) in reducers.items():
            model.reduce, model.fused = red, fused
            if name != NO_AR:
                logits[name] = model.forward(x, caches).float()
            ms[name] = graph_time(lambda: model.forward(x, caches))  # noqa: B023
        if phase == "decode" and str(batch) in args.compiled_batches.split(","):
            import commrt.fx

            model.reduce, model.fused = (lambda t: dist.all_reduce(t)), None
            # "compiled" runs no commrt pass at all (``installed`` also adopts and overlaps)
            for name, install in (("compiled", False), ("compiled + commrt.fx", True)):
                torch._dynamo.reset()
                with commrt.fx.installed() if install else contextlib.nullcontext():
                    fwd = torch.compile(model.forward, fullgraph=True, dynamic=False)
                    logits[name] = fwd(x, caches).float()
                    ms[name] = graph_time(lambda: fwd(x, caches))  # noqa: B023
        ref = ref_model.forward(x.float(), caches and [tuple(t.float() for t in c)
                                                       for c in caches])
        errs = {k: float((v - ref).norm() / ref.norm()) for k, v in logits.items()}
        err = max(errs.values())
        tokens = batch * seq
        row = {"phase": phase, "batch": batch, "tokens": tokens, "ms": ms,
               "tokens_per_s": {k: tokens / (v / 1e3) for k, v in ms.items()},
               "speedup": ms["dist.all_reduce"] / ms["commrt.all_reduce"],
               "speedup_fused": ms["dist.all_reduce"] / ms["commrt fused"],
               "speedup_compiled_fx": ms["dist.all_reduce"] / ms["compiled + commrt.fx"]
               if "compiled + commrt.fx" in ms else None,
               "speedup_compiled_fx_over_compiled": ms["compiled"] / ms["compiled + commrt.fx"]
               if "compiled" in ms else None, "logits_rel_err_vs_fp32": errs,
               "allreduce_bytes": tokens * shape["hidden"] * 2,
               # step time over the step without all-reduces, per all-reduce (2 a layer)
               "us_per_allreduce": {k: (ms[k] - ms[NO_AR]) * 1e3 / (2 * shape["layers"])
                                    for k in ("dist.all_reduce", "commrt.all_reduce")},
               "commrt_algorithm": comm.dispatcher.decide(tokens * shape["hidden"] * 2,
                                                          torch.bfloat16, "sum", "graph").algorithm}
        if phase == "decode" and str(batch) in dtensor_batches:
            row["dtensor"] = dtensor_rows(dt_model, x, caches)
            worst = max(row["dtensor"]["max_abs_diff_vs_unpatched"].values())
            assert worst == 0 or world > 2, f"patched DTensor logits differ: {row['dtensor']}"
        rows.append(row)
        if comm.rank == 0 and "dtensor" in row:
            print(f"{phase:>7} batch {batch:>4}: " + ", ".join(
                f"{k} {v:.3f} ms" for k, v in row["dtensor"]["ms"].items()), flush=True)
        if comm.rank == 0:
            print(f"{phase:>7} batch {batch:>4}: dist {ms['dist.all_reduce']:.3f} ms, commrt "
                  f"{ms['commrt.all_reduce']:.3f} ms ({row['commrt_algorithm']}), speedup "
                  f"{row['speedup']:.3f}x, fused {ms['commrt fused']:.3f} ms "
                  f"({row['speedup_fused']:.3f}x), no all-reduce {ms[NO_AR]:.3f} ms, "
                  f"logits rel err vs fp32 "
                  + ", ".join(f"{k} {v:.1e}" for k, v in errs.items())
                  + "".join(f", {k} {ms[k]:.3f} ms" for k in ("compiled", "compiled + commrt.fx")
                            if k in ms), flush=True)
        base = errs["dist.all_reduce"]
        assert err <= 1.5 * base + 1e-2, f"logits less accurate than dist.all_reduce's: {errs}"
        if comm.rank == 0:
            write_rows(args, comm, world, shape, rows)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
