"""``tvm-pool bench --device cuda`` on its CPU-only paths: it refuses cleanly without a GPU, and
its pieces (arch names, the table, the torch mapping's refusals) work. On a GPU it runs."""

from __future__ import annotations

import argparse

import pytest
import tvm

from tvm_pool.bench import cuda as bench_cuda
from tvm_pool.bench import runner


def _has_gpu() -> bool:
    try:
        return bool(tvm.cuda(0).exist)
    except Exception:  # pylint: disable=broad-except
        return False


@pytest.mark.skipif(_has_gpu(), reason="a CUDA device is present: the refusal path does not apply")
def test_refuses_without_a_gpu(tmp_path, capsys):
    code = runner.main(["--device", "cuda", "--quick", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "no CUDA device" in err and "nothing timed" in err
    assert not list(tmp_path.iterdir())  # no results written


@pytest.mark.skipif(_has_gpu(), reason="a CUDA device is present")
def test_cli_refuses_without_a_gpu(capsys):
    from tvm_pool import cli  # pylint: disable=import-outside-toplevel

    assert cli.main(["bench", "--device", "cuda", "--quick"]) == 2


def test_arch_names():
    assert bench_cuda.arch_of("8.0") == "sm_80"
    assert bench_cuda.arch_of("9.0") == "sm_90"
    assert bench_cuda.arch_of("7.5") == "sm_75"
    assert str(bench_cuda.gpu_target("sm_80").kind.name) == "cuda"


def _result():
    rows = [
        {"workload": "resnet_maxpool", "dtype": "float32", "min_bytes": 4_000_000, "copy_ms": 0.008,
         "ms": {"tvm_pool": 0.01, "tvm": 0.03, "torch": 0.02}, "na": {}},
        {"workload": "vgg_maxpool", "dtype": "float32", "min_bytes": 8_000_000, "copy_ms": 0.016,
         "ms": {"tvm_pool": 0.02, "tvm": 0.05, "torch": 0.01}, "na": {}},
        {"workload": "maxpool_int8", "dtype": "int8", "min_bytes": 1_000_000, "copy_ms": 0.004,
         "ms": {"tvm_pool": 0.005, "tvm": 0.01}, "na": {"torch": "int8 pooling not supported"}},
    ]
    return bench_cuda.with_geomeans({"device": "CUDA sm_80", "rows": [bench_cuda.summarize(r) for r in rows]})


def test_markdown_table():
    """Each row: % of the device-to-device copy limit, speedups over torch and the best peer;
    the summary: their geometric means (torch over the rows that have a torch time)."""
    result = _result()
    first, second, third = result["rows"]
    assert first["pct_copy"] == pytest.approx(80.0) and first["speedup_vs_torch"] == pytest.approx(2.0)
    assert second["speedup_vs_torch"] == pytest.approx(0.5) and second["speedup"] == pytest.approx(0.5)
    assert "speedup_vs_torch" not in third and third["speedup"] == pytest.approx(2.0)
    assert result["geomean_speedup_vs_torch"] == pytest.approx(1.0) and result["n_speedup_vs_torch"] == 2
    assert result["geomean_speedup"] == pytest.approx(2 ** (1 / 3)) and result["n_speedup"] == 3
    md = bench_cuda.to_markdown(result)
    assert "| resnet_maxpool | float32 | 0.0100 | 0.0300 | 0.0200 | 4.00 | 400.0 | 80% | 2.00x | 2.00x |" in md
    assert "| maxpool_int8 | int8 | 0.0050 | 0.0100 | n/a (int8 pooling not supported) | 1.00 | 200.0 | 80% | - | 2.00x |" in md
    assert "geomean speedup of tvm_pool vs PyTorch: **1.00x** (2 workloads); vs the best peer: **1.26x** (3 workloads)" in md


def test_copy_runner_copies():
    """The copy limit's runner (TVM's device-to-device copy), run on the CPU device."""
    call = bench_cuda.copy_runner(tvm.cpu(), 1000, 200)
    assert bench_cuda.time_ms(call, lambda: None, repeat=2, warmup=1) >= 0


def test_time_ms_median():
    calls = []
    ms = bench_cuda.time_ms(lambda: calls.append(1), lambda: None, repeat=5, warmup=2)
    assert len(calls) == 7 and ms >= 0


def test_torch_peer_refuses_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch has a CUDA device")
    w = runner.workloads(quick=True)[0]
    with pytest.raises(runner.NotAvailable, match="no CUDA device"):
        bench_cuda.peer_torch(w, runner.make_input(w))


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="no CUDA device on this machine (tvm.cuda(0) does not exist)")
def test_gpu_bench_one_workload(tmp_path):
    args = argparse.Namespace(quick=True, repeat=3, only="resnet_gap", output_dir=str(tmp_path))
    assert bench_cuda.main(args) == 0
    assert (tmp_path / "bench_cuda.md").exists()
