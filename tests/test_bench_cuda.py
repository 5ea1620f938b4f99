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


def test_markdown_table():
    result = {
        "device": "CUDA sm_80",
        "rows": [
            {"workload": "resnet_maxpool", "dtype": "float32", "min_bytes": 4_000_000,
             "ms": {"tvm_pool": 0.01, "tvm": 0.03, "torch": 0.02}, "na": {}},
            {"workload": "maxpool_int8", "dtype": "int8", "min_bytes": 1_000_000,
             "ms": {"tvm_pool": 0.005, "tvm": 0.01}, "na": {"torch": "int8 pooling not supported"}},
        ],
    }
    md = bench_cuda.to_markdown(result)
    assert "| resnet_maxpool | float32 | 0.0100 | 0.0300 | 0.0200 | 4.00 | 400.0 | 2.00x |" in md
    assert "n/a (int8 pooling not supported)" in md


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
