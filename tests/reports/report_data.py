"""Hand-built result tables and trace frames with the exact contract columns.

The numbers follow the α-β cost of ring allreduce and ring allgatherv so that the
expected winners and crossovers are known in closed form.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vgcsim.core.results import RESULT_COLUMNS

#: name -> (bandwidth_Bps, latency_s)
LINKS = {"1GbE": (125e6, 50e-6), "10GbE": (1.25e9, 20e-6), "IB-EDR": (12.5e9, 1e-6)}
#: trace -> (compressor, compression ratio, variance_s, codec_s)
TRACES = {
    "var2": ("variance", 400.0, 0.002, 0.003),
    "strom": ("strom", 50.0, 0.0, 0.003),
    "qsgd": ("qsgd", 8.0, 0.0, 0.004),
}
DENSE_BYTES = 4_000_000
COMPUTE_S = 0.05
WORLD_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _row(
    source,
    trace,
    compressor,
    cluster,
    p,
    method,
    collective,
    comp_s,
    var_s,
    codec_s,
    comm_s,
    payload,
):
    step = comp_s + var_s + codec_s + comm_s
    return {
        "source": source,
        "path": "closed_form" if source == "predicted" else "collective",
        "trace": trace,
        "compressor": compressor,
        "encoding": "fp32" if method == "dense" else "packed32",
        "cluster": cluster,
        "topology": "star",
        "compute_mode": "model",
        "device": "V100",
        "world_size": p,
        "method": method,
        "collective": collective,
        "step": -1,
        "compute_s": comp_s,
        "optimizer_s": 0.0,
        "variance_s": var_s,
        "codec_s": codec_s,
        "decode_s": 0.0,
        "comm_s": comm_s,
        "step_s": step,
        "payload_bytes_max": payload,
        "payload_bytes_mean": payload,
        "speedup_vs_dense": np.nan,
        "scaling_efficiency": COMPUTE_S / step,
        "throughput_samples_per_s": 32 * p / step,
    }


def build_results(sources=("predicted", "simulated"), traces=None) -> pd.DataFrame:
    rows = []
    for source in sources:
        skew = 1.0 if source == "predicted" else 1.05
        for trace, (comp, ratio, var_s, codec_s) in (traces or TRACES).items():
            for cluster, (bw, lat) in LINKS.items():
                for p in WORLD_SIZES:
                    dense_comm = (
                        0.0 if p == 1 else 2 * (p - 1) * lat + 2 * (p - 1) / p * DENSE_BYTES / bw
                    )
                    m = DENSE_BYTES / ratio
                    comp_comm = 0.0 if p == 1 else (p - 1) * lat + (p - 1) * m / bw
                    rows.append(
                        _row(
                            source,
                            trace,
                            "dense",
                            cluster,
                            p,
                            "dense",
                            "allreduce/ring",
                            COMPUTE_S,
                            0.0,
                            0.0,
                            dense_comm * skew,
                            DENSE_BYTES,
                        )
                    )
                    rows.append(
                        _row(
                            source,
                            trace,
                            comp,
                            cluster,
                            p,
                            "compressed",
                            "allgatherv/ring",
                            COMPUTE_S,
                            var_s,
                            codec_s,
                            comp_comm * skew,
                            m,
                        )
                    )
    df = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    dense = df[df["method"] == "dense"].set_index(["source", "trace", "cluster", "world_size"])[
        "step_s"
    ]
    key = list(zip(df["source"], df["trace"], df["cluster"], df["world_size"], strict=True))
    df["speedup_vs_dense"] = dense.loc[key].to_numpy() / df["step_s"].to_numpy()
    return df


def build_payloads(steps=6, workers=2, layers=(100, 10, 1000), density=0.01) -> pd.DataFrame:
    rows = []
    for s in range(steps):
        for w in range(workers):
            for li, n in enumerate(layers):
                sent = max(1, int(n * density * (1 + s) / steps)) if density < 1 else n
                rows.append(
                    {
                        "step": s,
                        "worker": w,
                        "layer": li,
                        "numel": n,
                        "sent": sent,
                        "bits_packed32": 32 * sent + 64,
                        "bits_fp32": 32 * n,
                    }
                )
    return pd.DataFrame(rows)


LABELS = {"var2": "variance α=2", "strom": "strom τ=0.01", "qsgd": "qsgd s=4", "d": "dense"}


class FakeTrace:
    """The attributes of vgcsim.traces.io.Trace that reports read."""

    def __init__(self, name: str, compressor: str, density: float) -> None:
        self.name = name
        self.compressor = compressor
        self.payloads = build_payloads(steps=8, density=density)
        self.primary_encoding = "packed32"
        self.workers = 2
        self.steps_count = 8
        self.layers = [{"index": i, "name": f"fc{i}.weight"} for i in range(3)]
        self.evals = pd.DataFrame(
            {
                "step": [0, 7],
                "test_acc": [0.3, 0.9 if density == 1 else 0.87],
                "train_acc": [0.3, 0.9],
            }
        )
        self.header = {"compressor": {"name": compressor, "params": {}}}
