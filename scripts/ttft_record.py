"""Write benchmarks/results/ttft.md from the JSON of `tiered-kv bench ttft --json`.

    tiered-kv bench ttft --json > /tmp/ttft.json
    python scripts/ttft_record.py /tmp/ttft.json "tiered-kv bench ttft --json"
    scripts/assemble_benchmarks.sh

Every number comes from the JSON; nothing here is typed by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _ms(d: dict, case: str) -> str:
    return f"{d[case + '_ms']:,.0f} ({d[case + '_ms_q1']:,.0f}-{d[case + '_ms_q3']:,.0f})"


def render(r: dict, command: str) -> str:
    rows = []
    for n, d in sorted(r["lengths"].items(), key=lambda kv: int(kv[0])):
        rows.append(f"| {int(n):,} | {_ms(d, 'miss')} | {_ms(d, 'ssd_cold_hit')} | {_ms(d, 'ssd_warm_hit')} | "
                    f"{_ms(d, 'ssd_host_hit')} | {r['speedup_ssd_hit_vs_miss'][n]:.1f}x | "
                    f"{r['speedup_ssd_host_hit_vs_miss'][n]:.1f}x | {d['decoder_window_reuse']:.0%} "
                    f"({d['ssd_host_hit_decoder_tokens']:.0f} tokens) |")
    anomalies = "\n".join(f"- {a}" for a in r["anomalies"]) or "- none (every miss is slower than the shorter one's)"
    f = r["prefill_flops"]
    return f"""# TTFT: cold and warm SSD hits against a miss

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

Anomalies flagged by the benchmark:
{anomalies}

Prefill FLOPs at {f['tokens']:,} tokens (FlopCounterMode): bounded replay (R={f['replay_tokens']}) /
decoder-only baseline = {f['prefill_flops_ratio']:.3f}; with the decoder over all tokens
{f['full_decoder_ratio']:.3f}; layer-token model {f['layer_token_ratio']:.3f}.
"""


def main(argv: list[str]) -> int:
    r = json.loads(Path(argv[1]).read_text())
    command = argv[2] if len(argv) > 2 else "tiered-kv bench ttft --json"
    out = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "ttft.md"
    out.write_text(render(r, command))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
