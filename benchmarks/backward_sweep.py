"""Experiment: the flash template's backward tiles, each through pointers or TMA, with a dQ kernel or
atomic dQ, on benchmarks/attention.py's training shapes (forward and backward, CUDA graphs).

    python benchmarks/backward_sweep.py   (writes $OUT/bwd_sweep.json)
"""
import json, os, sys, time, itertools, multiprocessing as mp
sys.path.insert(0, "benchmarks")
import torch

TRAIN = [n for n in ["gpt2_train", "causal_train_4x512", "bert_train_16x512", "distilbert_train_16x256", "bert_padding_train_16x512"]]
TILES = [(16,64,4,3),(32,64,4,3),(64,64,4,2),(64,64,8,2),(16,128,4,3),(32,128,4,3),(32,128,8,3),(32,128,8,2),(64,128,8,2),(64,128,8,3)]
FWD = (64, 128, 4, 2, 1)

def cfgs():
    from tunesmith_triton import flash
    return [flash.FlashConfig(*FWD[:4], *t, tma=FWD[4], bwd_tma=r, atomic_dq=a) for t in TILES for r in (0, 1) for a in (0, 1)]

def kernel(problem, config):
    from tunesmith_triton import flash
    causal, scale = bool(problem.scalar("is_causal")), float(problem.scalar("scale"))
    return lambda q, k, v, mask=None: flash.attention(q, k, v, mask, causal, scale, config)

def warm(task):
    name, i = task
    import attention as ab
    from tunesmith.problem import build_problem
    from tunesmith.ops import measured
    tensors, scalars = ab.make(name, "cuda")
    problem, inputs = build_problem("attention", tensors, scalars)
    try:
        measured(problem, kernel(problem, cfgs()[i]))(*inputs)
        torch.cuda.synchronize()
        return None
    except Exception as e:
        return f"{name} {cfgs()[i]}: {type(e).__name__} {str(e)[:200]}"

def main():
    t0 = time.time()
    tasks = [(n, i) for n in TRAIN for i in range(len(cfgs()))]
    with mp.get_context("spawn").Pool(14) as pool:
        errs = [e for e in pool.map(warm, tasks, chunksize=1) if e]
    print("warm", round(time.time() - t0, 1), "s", errs[:5], flush=True)
    import attention as ab
    from tunesmith.problem import build_problem
    from tunesmith.ops import measured, reference, relative_error
    from tunesmith.bench.timing import rotating_inputs
    from tunesmith_aten.attention import sdpa
    out = {"device": torch.cuda.get_device_name(), "rows": {}}
    for name in TRAIN:
        tensors, scalars = ab.make(name, "cuda")
        problem, inputs = build_problem("attention", tensors, scalars)
        sets = rotating_inputs(problem, inputs)
        ref = reference(problem, inputs)
        row = {}
        for label, k in [("cudnn", sdpa("cudnn", problem))] + [(str(c), kernel(problem, c)) for c in cfgs()]:
            call = measured(problem, k)
            try:
                err = relative_error(call(*inputs), ref)
                row[label] = (round(ab.time_ms(call, sets), 5), float(f"{err:.3g}"))
            except Exception as e:
                row[label] = (None, f"{type(e).__name__} {str(e)[:100]}")
        out["rows"][name] = row
        best = sorted((v[0], k) for k, v in row.items() if v[0])
        print(name, "cudnn", row["cudnn"], "best", best[:4], flush=True)
    json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "bwd_sweep.json"), "w"), indent=1)
    print("total", round(time.time() - t0, 1))

if __name__ == "__main__":
    main()
