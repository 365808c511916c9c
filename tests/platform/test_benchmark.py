"""The throughput benchmark runs (tiny sizes) and prints a positive rate for every phase."""

import re
import runpy
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "throughput.py"


def test_throughput_script_prints_every_phase(capsys, monkeypatch) -> None:
    monkeypatch.setattr(
        sys,
        "argv",
        [
            str(BENCH),
            "--device",
            "cpu",
            "--threads",
            "1",
            "--stream",
            "64",
            "--memory",
            "40",
            "--candidates",
            "24",
            "--epochs",
            "1",
            "--no-warmup",
        ],
    )
    try:
        runpy.run_path(str(BENCH), run_name="__main__")
    except SystemExit as done:
        assert done.code == 0
    out = capsys.readouterr().out
    for phase, count in (("stream pass", 64 + 64), ("memory epochs", 40), ("uncertainty", 24), ("evaluation", 10000)):
        row = next(line for line in out.splitlines() if line.startswith("cpu:") and phase in line)
        numbers = re.findall(r"[\d,]+\.?\d*", row.split(phase, 1)[1])
        assert int(numbers[0].replace(",", "")) == count, row
        assert float(numbers[2].replace(",", "")) > 0 and "MiB RSS" in row
