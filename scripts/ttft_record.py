"""Write benchmarks/results/ttft.md (and ttft.json) from the JSON of `tiered-kv bench ttft --json`.

    tiered-kv bench ttft --json > /tmp/ttft.json
    python scripts/ttft_record.py /tmp/ttft.json "tiered-kv bench ttft --json"
    python scripts/ttft_record.py /tmp/ttft_short.json "tiered-kv bench ttft --json --lengths 64 ..." short
    scripts/assemble_benchmarks.sh

The optional third argument ``short`` records the short-prompt run (ttft_short.md/.json) that
:func:`tiered_kv.viz.write_points.measured_crossover` reads for the recompute-vs-load crossover
(figure 19, notebook 04). Both pages state the measured crossover, computed from the JSON.

Every number comes from the JSON; nothing here is typed by hand.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def _ms(d: dict, case: str) -> str:
    return f"{d[case + '_ms']:,.0f} ({d[case + '_ms_q1']:,.0f}-{d[case + '_ms_q3']:,.0f})"


TITLES = {"ttft": "TTFT: cold and warm SSD hits against a miss",
          "ttft_short": "TTFT of short prompts: where loading starts to beat recomputing"}


def render(r: dict, command: str, stem: str = "ttft") -> str:
    from tiered_kv.viz.write_points import crossover_from_record

    crossover = crossover_from_record(r, f"{stem}.json")[1]
    rows = []
    for n, d in sorted(r["lengths"].items(), key=lambda kv: int(kv[0])):
        rows.append(f"| {int(n):,} | {_ms(d, 'miss')} | {_ms(d, 'ssd_cold_hit')} | {_ms(d, 'ssd_warm_hit')} | "
                    f"{_ms(d, 'ssd_host_hit')} | {r['speedup_ssd_hit_vs_miss'][n]:.1f}x | "
                    f"{r['speedup_ssd_host_hit_vs_miss'][n]:.1f}x | {d['decoder_window_reuse']:.0%} "
                    f"({d['ssd_host_hit_decoder_tokens']:.0f} tokens) |")
    anomalies = "\n".join(f"- {a}" for a in r["anomalies"]) or "- none (every miss is slower than the shorter one's)"
    f = r["prefill_flops"]
    return f"""# {TITLES[stem]}

Written by `scripts/ttft_record.py` from the JSON of one run of:

```bash
{command}
```

Model `{r['model']}` ({r['params']:,} parameters, W={r['window_tokens']}, R={r['replay_tokens']}),
{r['fmt']} global KV in {r['block_size_tokens']}-token chunks, the cached previous turn is the prompt
minus its last {r['suffix_tokens']} tokens, {r['threads']} torch thread(s), {r['repeats']} interleaved
repeats per case. Cold reads: {r['cold_read_method']} (store file system: {r['store_filesystem']}).
Each cell: median TTFT in ms (interquartile range). The SSD+host case continues the decoder
from the host tier's exact decoder windows when it has them (last column: how often, and the
decoder tokens that cost).

| prompt (tokens) | miss | SSD hit, cold | SSD hit, warm | SSD + host hit | speedup cold hit | speedup SSD+host | decoder windows reused |
|---:|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

Recompute-vs-load crossover from these medians
(`tiered_kv.sim.cluster.latency.measured_crossover_tokens`): {crossover}.

Anomalies flagged by the benchmark:
{anomalies}

Prefill FLOPs at {f['tokens']:,} tokens (FlopCounterMode): bounded replay (R={f['replay_tokens']}) /
decoder-only baseline = {f['prefill_flops_ratio']:.3f}; with the decoder over all tokens
{f['full_decoder_ratio']:.3f}; layer-token model {f['layer_token_ratio']:.3f}.
"""


def main(argv: list[str]) -> int:
    src = Path(argv[1])
    r = json.loads(src.read_text())
    command = argv[2] if len(argv) > 2 else "tiered-kv bench ttft --json"
    stem = "ttft_short" if len(argv) > 3 and argv[3] == "short" else "ttft"
    results = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
    dest = results / f"{stem}.json"
    if src.resolve() != dest.resolve():
        shutil.copyfile(src, dest)
    out = results / f"{stem}.md"
    out.write_text(render(r, command, stem))
    print(f"wrote {out} and {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
