"""Kernel throughput: FP4 quantize/dequantize (MXFP4, NVFP4) and sliding-window attention.

For every path it reports seconds per call, elements/s, the bytes a call must move per
element, and GB/s = bytes_per_element * elements / seconds (10^9 bytes). Bytes per element:

- clone (the baseline):  2 * in_bytes                     (read + write)
- quantize:              in_bytes + 0.5 + 1/block        (read x; write nibbles + scale codes;
                         NVFP4's per-head amax pass re-reads x and is not counted)
- dequantize:            0.5 + 1/block + out_bytes
- attention:             (|q| + |k| + |v| + |o|) * elem_bytes / |o|, each tensor once; the
                         attention entry also gives TFLOP/s over the visible (query, key) pairs.

On the CPU each path's GB/s is set against ``torch.clone`` of the same input, timed
alternately with it in the same run (``ratio_vs_clone``; the target for the CPU paths is at
least 0.25). On CUDA the figures are also a fraction of the device's peak memory bandwidth
(H200: 4.8 TB/s; the target is 0.75). Times are the median of ``--repeat`` calls after a
warm-up call (which also compiles or loads the numba / Triton kernels), every call recorded in
``seconds_all`` (and each call's ratio against the clone timed just before it in
``ratio_vs_clone_all``); CUDA times are ``triton.testing.do_bench``'s median.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from tiered_kv.bench._pages import Page, Paired, Row, every_run, ms, ratio, spread, yes

NAME = "kernels"
HELP = "FP4 quantize/dequantize and sliding-window attention throughput (GB/s vs clone / peak)"

#: Peak HBM bandwidth in GB/s by device-name fragment (vendor datasheets).
PEAK_GBPS = {"H200": 4800.0, "H100 NVL": 3900.0, "H100": 3350.0, "A100": 2039.0,
             "L40S": 864.0, "B200": 8000.0}


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", default=None,
                        help="input bytes for the FP4 kernels, e.g. 16MiB (default: 8MiB on "
                             "CPU, 1GiB on CUDA)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                        help="input dtype (default: float32 on CPU, bfloat16 on CUDA)")
    parser.add_argument("--repeat", type=int, default=7,
                        help="timed calls per path (median kept, every call recorded; the slow "
                             "torch reference on the CPU gets half as many)")
    parser.add_argument("--attn-tokens", type=int, default=None,
                        help="replay segment length Tq for attention (default: 256 CPU, 8192 "
                             "CUDA); keys are Tq + window")
    parser.add_argument("--window", type=int, default=512, help="attention window (tokens)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="CPU timer: process CPU time (default; with one thread it leaves "
                             "out the time other processes hold the core) or wall clock")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for torch and numba, clone included (default 1: a "
                             "per-core comparison that stays fair on a shared machine)")
    parser.add_argument("--peak-gbps", type=float, default=None,
                        help="peak memory bandwidth to compare with (default: by device name)")


def _cpu_pair(fn: Callable[[], Any], baseline: Callable[[], Any], repeat: int,
              clock: Callable[[], float]) -> tuple[float, float, list[float], list[float]]:
    """Median times of ``fn`` and ``baseline`` and every timed call of each, measured
    alternately so that load from other processes on a shared machine hits both alike (medians,
    not best-of: :mod:`._pages`)."""
    fn()
    baseline()
    fn_all: list[float] = []
    base_all: list[float] = []
    for _ in range(max(repeat, 1)):
        t0 = clock()
        baseline()
        t1 = clock()
        fn()
        t2 = clock()
        base_all.append(t1 - t0)
        fn_all.append(t2 - t1)
    return statistics.median(fn_all), statistics.median(base_all), fn_all, base_all


def _entry(timing: Timing, elements: int, bytes_per_element: float, clone_gbps: float | None,
           peak_gbps: float | None) -> dict:
    """One path's figures from its :data:`Timing`; ``ratio_vs_clone_all`` pairs each call with the
    clone timed just before it."""
    seconds, base_seconds, runs, base_runs = timing
    gbps = bytes_per_element * elements / seconds / 1e9
    out = {"seconds": seconds, "elements_per_s": elements / seconds,
           "bytes_per_element": bytes_per_element, "gbps": gbps, "seconds_all": list(runs)}
    if base_seconds is not None:
        out["clone_gbps"] = clone_gbps
        out["ratio_vs_clone"] = gbps / clone_gbps
        out["clone_seconds_all"] = list(base_runs)
        clone_bpe = clone_gbps * base_seconds * 1e9 / elements  # bytes the clone moves per element
        out["ratio_vs_clone_all"] = [b / f * bytes_per_element / clone_bpe
                                     for f, b in zip(runs, base_runs, strict=True)]
    if peak_gbps:
        out["fraction_of_peak"] = gbps / peak_gbps
    return out


def run(args: argparse.Namespace) -> dict:
    import torch

    from tiered_kv.units import parse_bytes

    cuda = torch.cuda.is_available() if args.device == "auto" else args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available")
    device = torch.device("cuda" if cuda else "cpu")
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    size = parse_bytes(args.size or ("1GiB" if cuda else "8MiB"), name="--size")
    for flag in ("repeat", "window", "threads"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag} must be >= 1; got {getattr(args, flag)}")
    threads_before = torch.get_num_threads()
    from tiered_kv.kernels import fp4

    if not cuda and fp4._has_numba():
        import numba

        numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
        # Launching numba's threading layer resets OpenMP's thread count, torch's included:
        # launch it first, then set torch's.
        fp4.quantize(torch.zeros(32), backend="numba")
    torch.set_num_threads(args.threads)
    try:
        return _run(args, torch, device, dtype, size, cuda)
    finally:
        torch.set_num_threads(threads_before)


#: Timing of one path: (median s, median paired clone s or None, every call, every clone call or None).
Timing = tuple[float, float | None, list[float], list[float] | None]
Timer = Callable[[Callable[[], Any], Callable[[], Any], int], Timing]
_HEADS, _DIM = 8, 128  # the FP4 input is [tokens, heads, dim]


def _timer(args: argparse.Namespace, cuda: bool) -> Timer:
    """``timed(fn, baseline, reps)``: CUDA events via do_bench (no paired baseline), or on the CPU
    ``fn`` alternated with ``baseline`` on the chosen clock."""
    if cuda:
        from triton.testing import do_bench

        def timed(fn: Callable[[], Any], baseline: Callable[[], Any], reps: int) -> Timing:
            fn()
            s = do_bench(fn, warmup=25, rep=max(50, 20 * reps), return_mode="median") / 1e3
            return s, None, [s], None
        return timed
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    return lambda fn, baseline, reps: _cpu_pair(fn, baseline, reps, clock)


def _paired_gbps(t: Timing, clone_bytes: float) -> float | None:
    """GB/s of the clone timed beside this path (None where the timer pairs none: on CUDA)."""
    return None if t[1] is None else clone_bytes / t[1] / 1e9


def _header(args: argparse.Namespace, torch, device, dtype, tokens: int, cuda: bool) -> dict[str, Any]:
    """What the figures were measured on: device, versions, dtype, shape, clock and peak bandwidth."""
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    peak = args.peak_gbps
    if cuda and peak is None:
        peak = next((v for k, v in PEAK_GBPS.items() if k in name), None)
    result: dict[str, Any] = {
        "device": name, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "dtype": str(dtype).replace("torch.", ""), "shape": [tokens, _HEADS, _DIM],
        "elements": tokens * _HEADS * _DIM, "peak_gbps": peak,
        "clock": "cuda events (do_bench)" if cuda else (
            "process CPU time" if args.clock == "cpu" else "wall"),
    }
    try:
        import triton
        result["triton"] = triton.__version__
    except ImportError:  # pragma: no cover
        result["triton"] = None
    return result


def _run(args: argparse.Namespace, torch, device, dtype, size: int, cuda: bool) -> dict:
    from tiered_kv.kernels import fp4

    in_bytes = torch.empty((), dtype=dtype).element_size()
    result = _header(args, torch, device, dtype, max(1, size // (in_bytes * _HEADS * _DIM)), cuda)
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(result["shape"], generator=g, device=device, dtype=torch.float32).to(dtype)
    timed, peak = _timer(args, cuda), result["peak_gbps"]
    t = timed(lambda: x.clone(), lambda: x.clone(), args.repeat)
    clone_s = t[0] if cuda else t[1]
    clone_gbps = 2 * in_bytes * x.numel() / clone_s / 1e9
    result["clone"] = {"seconds": clone_s, "bytes_per_element": 2.0 * in_bytes, "gbps": clone_gbps}
    if not cuda:
        result["clone"]["seconds_all"] = t[3]
    if peak:
        result["clone"]["fraction_of_peak"] = clone_gbps / peak
    backends = ("triton", "torch") if cuda else ("numba", "torch") if fp4._has_numba() else ("torch",)
    result["fp4"] = _fp4(args, x, backends, timed, peak, cuda)
    result["attention"] = _attention(args, torch, g, x.dtype, timed, peak, cuda)
    result["bytes_per_element_formulas"] = {
        "clone": "2 * in_bytes",
        "quantize": "in_bytes + 0.5 + 1/block (block 32 mxfp4, 16 nvfp4)",
        "dequantize": "0.5 + 1/block + out_bytes",
        "attention": "(2*|q| + |k| + |v|) * elem_bytes / |q| (output counted as |q|)",
    }
    return result


def _fp4(args: argparse.Namespace, x, backends: tuple[str, ...], timed: Timer, peak: float | None,
         cuda: bool) -> dict[str, Any]:
    """Quantize and dequantize in every format and backend, each timed beside a clone of ``x``."""
    from tqdm import tqdm

    from tiered_kv.kernels import fp4
    from tiered_kv.keys import FORMATS, bytes_per_element

    n, in_bytes = x.numel(), x.element_size()
    clone_bytes = 2 * in_bytes * n
    out: dict[str, Any] = {f: {"quantize": {}, "dequantize": {}} for f in FORMATS}
    jobs = [(f, b) for f in FORMATS for b in backends]
    for fmt, backend in tqdm(jobs, desc="fp4 kernels", leave=False):
        t_jit = time.perf_counter()
        q = fp4.quantize(x, fmt, backend=backend)
        fp4.dequantize(q, x.dtype, backend=backend)
        jit_s = time.perf_counter() - t_jit
        reps = args.repeat if (cuda or backend != "torch") else max(1, args.repeat // 2)
        tq = timed(lambda f=fmt, b=backend: fp4.quantize(x, f, backend=b), lambda: x.clone(), reps)
        td = timed(lambda q=q, b=backend: fp4.dequantize(q, x.dtype, backend=b), lambda: x.clone(), reps)
        side = bytes_per_element(fmt)
        for op, t in (("quantize", tq), ("dequantize", td)):  # each moves the input and the FP4 side
            out[fmt][op][backend] = _entry(t, n, in_bytes + side, _paired_gbps(t, clone_bytes), peak)
        out[fmt]["quantize"][backend]["first_call_seconds"] = jit_s
    return out


def _attention(args: argparse.Namespace, torch, g, dtype, timed: Timer, peak: float | None,
               cuda: bool) -> dict[str, Any]:
    """A replay segment of Tq queries at the end of Tq + window keys (GQA 4:1), per backend."""
    from tiered_kv.kernels import swa

    device, in_bytes = g.device, torch.empty((), dtype=dtype).element_size()
    Tq, W = args.attn_tokens or (8192 if cuda else 256), args.window
    Hq, Hkv, D = (32, 8, 128) if cuda else (8, 2, 64)
    Tk = Tq + W
    q = torch.randn((Tq, Hq, D), generator=g, device=device).to(dtype)
    k = torch.randn((Tk, Hkv, D), generator=g, device=device).to(dtype)
    v = torch.randn((Tk, Hkv, D), generator=g, device=device).to(dtype)
    pairs = swa.visible_pairs(Tq, Tk, W, W)
    attn_bytes = (2 * q.numel() + k.numel() + v.numel()) * in_bytes / q.numel()
    attn: dict[str, Any] = {"shape": {"Tq": Tq, "Tk": Tk, "Hq": Hq, "Hkv": Hkv, "D": D,
                                      "window": W}, "visible_pairs_per_head": pairs}
    for backend in ("triton", "torch") if cuda else ("torch",):
        t = timed(lambda b=backend: swa.sliding_window_attention(q, k, v, W, W, backend=b),
                  lambda: q.clone(), args.repeat if cuda else max(2, args.repeat // 2))
        e = _entry(t, q.numel(), attn_bytes, _paired_gbps(t, 2 * q.numel() * in_bytes), peak)
        e["tflops"] = 4.0 * pairs * Hq * D / t[0] / 1e12
        attn[backend] = e
    return attn


# ------------------------------------------------------------------------------------ the record
#: Targets (goals set when the kernels were specified; not measurements).
CPU_RATIO_TARGET = 0.25   # CPU FP4 paths at least a quarter of clone bandwidth
GPU_TBPS_TARGET = 3.5     # H200 FP4 quantize/dequantize, about 75 % of 4.8 TB/s


def kernel_ratio(e: dict) -> Paired | None:
    """A path's ratio vs clone: each call against the clone timed just before it, their median
    and range (``ratio_vs_clone_all``). The clone's own time includes the page faults of its fresh
    output, which differ from call to call, so only calls timed together are compared."""
    runs = e.get("ratio_vs_clone_all")
    return Paired.of(runs) if runs else None


def _ratio_cell(e: dict) -> str:
    p = kernel_ratio(e)
    return "-" if p is None else p.text(bold=True)


def _attention_rows(a: dict) -> list[str]:
    sh, rows = a["shape"], []
    for path, e in a.items():
        if isinstance(e, dict) and "gbps" in e:
            rows.append(f"| attention Tq {sh['Tq']}, Tk {sh['Tk']}, {sh['Hq']}/{sh['Hkv']} heads, D {sh['D']}, "
                        f"W {sh['window']} | forward | {path} | {spread(every_run(e, 'seconds'), ms)} | "
                        f"{e['gbps']:.2f} ({e['tflops'] * 1e3:.1f} GFLOP/s) | {_ratio_cell(e)} |")
    return rows


def render_record(r: dict) -> str:
    """The kernels section from the JSON of one ``tiered-kv bench kernels --json`` run."""
    clone = [r["clone"]["bytes_per_element"] * r["elements"] / s / 1e9 for s in every_run(r["clone"], "seconds")]
    lines = [f"Device `{r['device']}`, torch {r['torch']}, {r['threads']} thread(s), {r['dtype']} input "
             f"shaped {r['shape']} ({r['elements']:,} elements), clock: {r['clock']}. Each path is timed "
             "right after a clone of the same input; the ratio of each call is against the clone "
             "timed just before it, and the cell is the median of those paired ratios (their range, "
             "how many). Bytes per element: "
             + "; ".join(f"{k}: {v}" for k, v in r["bytes_per_element_formulas"].items()) + ".",
             "", f"Clone alone (its own timing pass): {spread(clone, lambda g: f'{g:.1f} GB/s')}.", "",
             "| format | op | path | seconds per call | GB/s (median) | ratio vs clone (median of paired calls) |",
             "|---|---|---|---|---:|---|"]
    for fmt, ops in r["fp4"].items():
        for op, paths in ops.items():
            for path, e in paths.items():
                lines.append(f"| {fmt} | {op} | {path} | {spread(every_run(e, 'seconds'), ms)} | "
                             f"{e['gbps']:.2f} | {_ratio_cell(e)} |")
    return "\n".join(lines + _attention_rows(r["attention"]))


def _summary_cpu(k: dict) -> tuple[str, str]:
    parts, met = [], []
    for op in ("dequantize", "quantize"):
        cells = []
        for fmt, ops in k["fp4"].items():
            path = "numba" if "numba" in ops[op] else next(iter(ops[op]))
            p = kernel_ratio(ops[op][path])
            cells.append(f"{fmt.upper()} {p.text()}")
            met.append(f"{fmt.upper()} {op} {yes(p.median >= CPU_RATIO_TARGET)}")
        parts.append(f"{op} " + ", ".join(cells))
    ref = [kernel_ratio(ops[op]["torch"]).median for ops in k["fp4"].values() for op in ops if "torch" in ops[op]]
    tail = f" ({path} path; torch reference medians {ratio(min(ref))}-{ratio(max(ref))})" if ref else ""
    return "; ".join(parts) + " of clone bandwidth (median of paired calls, their range)" + tail, "; ".join(met)


def _summary_gpu(k: dict) -> tuple[str, str]:
    gb = {f"{fmt.upper()} {op}": ops[op]["triton"]["gbps"] for fmt, ops in k["fp4"].items() for op in ops
          if "triton" in ops[op]}
    return (", ".join(f"{n} {v / 1e3:.2f} TB/s" for n, v in gb.items()) + f" on {k['device']}",
            "; ".join(f"{n} {yes(v / 1e3 >= GPU_TBPS_TARGET)}" for n, v in gb.items()))


PAGES = (
    Page("kernels", render_record, "tiered-kv bench kernels --json", title="FP4 kernels (`tiered-kv bench kernels`)"),
    Page("kernels_gpu", render_record, "tiered-kv bench kernels --json",
         title="FP4 kernels on the GPU (`bash benchmarks/gpu_check.sh`: `tiered-kv bench kernels`)"),
)
SUMMARY = (
    Row("FP4 kernels, CPU", ("kernels",), lambda *_: f">= {CPU_RATIO_TARGET}x clone (issue 2)", _summary_cpu),
    Row("FP4 kernels, H200", ("kernels_gpu",), lambda *_: f">= {GPU_TBPS_TARGET} TB/s (issue 2)", _summary_gpu,
        pending="bash benchmarks/gpu_check.sh"),
)
