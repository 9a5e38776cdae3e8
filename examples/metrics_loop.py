"""Always-on stage metrics in a toy training loop on CPU (runs in seconds).

    python examples/metrics_loop.py [--steps 5] [--prometheus]

Every step of every stage is timed from the same annotations that mark profiled regions (here
nothing is profiled at all): ``on_step`` hands each step's flat timings to a "tracker" (a print;
``wandb.log`` or a TensorBoard writer take one line), and with ``--prometheus`` the process serves
them on a free port of 127.0.0.1, scraped once at the end.
"""

from __future__ import annotations

import argparse
import time
import urllib.request

from profdsl import Metrics, Profiler, ProfilerConfig, mini_batch_window, profile_stage


@profile_stage("generate")
def generate(n: int) -> list[int]:
    time.sleep(0.002)
    return list(range(n))


@profile_stage("update_actor")
def update_actor(batch: list[int]) -> float:
    loss = 0.0
    for mini_batch in mini_batch_window([batch[i : i + 4] for i in range(0, len(batch), 4)]):
        with profile_stage("forward_backward"):
            time.sleep(0.001)
            loss += sum(mini_batch) * 1e-3
    return loss


def track(step: int, metrics: dict[str, float]) -> None:
    """A stand-in for ``wandb.log(metrics, step=step)``."""
    shown = {k: round(v * 1e3, 2) for k, v in metrics.items() if k.startswith("timing_s/")}
    print(f"step {step}: ms {shown}, mini-batches {metrics['timing_count/update_actor/mini_batch']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prometheus", action="store_true", help="also serve the metrics (port 0)")
    args = parser.parse_args()
    exporters = ["prometheus"] if args.prometheus else []
    config = ProfilerConfig(metrics=Metrics(enabled=True, exporters=exporters, port=0))
    with Profiler(config, role="actor", on_step=track) as profiler:
        for step in range(args.steps):
            with profiler.step(step):
                update_actor(generate(16))
        if args.prometheus and profiler.meter.exporters:
            port = profiler.meter.exporters[0].server.port  # type: ignore[attr-defined]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
                text = response.read().decode()
            print("\n".join(line for line in text.splitlines() if line.startswith("profdsl_stage_seconds_count")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
