import sys, torch
sys.path.insert(0, "benchmarks/probes"); sys.path.insert(0, "benchmarks")
from probe_narrow_costs import cell_data
from commrt.fx.scatter_narrow import narrow_index_add, state_numel
from commrt.fx import scatter_scratch
for (dt, w, rows, dist) in ((torch.float32, 16, 1024, "uniform"), (torch.float32, 0, 65536, "uniform"), (torch.float32, 16, 1024, "hot")):
    out, idx, vals = cell_data(dt, w, rows, dist)
    ref = out.double().index_add(0, idx, vals.double())
    for kw in ({}, {"scatter_plans": True}, {"from_zero": True}, {"from_zero": True, "pdl": False}, {"from_zero": True, "pdl": False, "scatter_plans": True}):
        for P in (128, 1):
            st = torch.zeros(state_numel(), device="cuda", dtype=torch.int32)
            errs = []
            for _ in range(3):
                got = narrow_index_add(out, idx, vals, P, state=st, **kw)
                torch.cuda.synchronize()
                d = (got.double() - ref)
                errs.append(float(d.norm() / ref.norm()))
            buf = list(scatter_scratch._buffers.values())[0]
            nz = int((buf != 0).sum())
            bad = (d.abs() > 1e-3 * ref.abs().max()).nonzero()
            print(w, rows, dist, P, kw, st[:3].tolist(), ["%.1e" % e for e in errs], "scratch nonzero", nz, "bad elems", bad.shape[0], bad[:4].tolist(), flush=True)
