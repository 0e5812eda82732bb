"""`bench --plan-only --max-context`: the longest prompt per method, from the analytic device and host model."""

from __future__ import annotations

import pytest

from app.cli import main
from engine.context_plan import (
    MaxContext,
    headwise_bytes,
    layerwise_bytes,
    max_context,
    model_facts,
    standard_bytes,
)
from engine.synthetic import parameter_count, synthetic_config

GB = 10**9


@pytest.fixture(scope="module")
def llama3():
    config = synthetic_config("llama3-8b")
    return model_facts(config, 2, parameter_count(config))


def test_the_facts_of_llama3_8b(llama3):
    assert llama3.kv_token == 2 * 32 * 8 * 128 * 2  # 128 KiB per token in bf16
    assert llama3.weights == 8_030_261_248 * 2 and llama3.query_per_kv == 4 and llama3.context_window == 8192


def test_each_method_is_the_longest_that_fits(llama3):
    gpu, host = 24 * GB, 400 * GB
    standard, layerwise, headwise = max_context(llama3, gpu, host)
    assert standard_bytes(llama3, standard.tokens) <= gpu < standard_bytes(llama3, standard.tokens + 1)
    assert layerwise_bytes(llama3, layerwise.tokens) <= gpu < layerwise_bytes(llama3, layerwise.tokens + 1)
    assert headwise_bytes(llama3, headwise.tokens, headwise.chunk) <= gpu
    assert headwise.tokens == host // llama3.kv_token  # with ample device memory for one head, host RAM decides
    assert standard.tokens < layerwise.tokens < headwise.tokens


def test_with_a_terabyte_of_host_ram_one_head_of_the_gpu_decides(llama3):
    gpu = 24 * GB
    headwise = max_context(llama3, gpu, 1000 * GB)[2]
    assert headwise.tokens < 1000 * GB // llama3.kv_token
    assert (
        headwise_bytes(llama3, headwise.tokens, headwise.chunk) <= gpu < headwise_bytes(llama3, headwise.tokens + 1, 1)
    )


def test_a_small_host_limits_the_offloading_methods(llama3):
    host = 4 * GB
    _, layerwise, headwise = max_context(llama3, 24 * GB, host)
    assert layerwise.tokens == headwise.tokens == host // llama3.kv_token


def test_no_room_for_the_weights_means_no_context(llama3):
    assert max_context(llama3, 8 * GB, 100 * GB) == [
        MaxContext("standard", 0),
        MaxContext("layer-wise", 0),
        MaxContext("head-wise", 0, None),
    ]


def test_the_command_prints_one_line_per_method(capsys):
    argv = ["bench", "--plan-only", "--max-context", "--model", "synthetic:llama3.1-8b"]
    assert main([*argv, "--gpu-memory", "24GB", "--host-ram", "64GB"]) == 0
    lines = capsys.readouterr().out.splitlines()
    methods = [line.split(":")[0] for line in lines[1:4]]
    assert methods == ["standard", "layer-wise", "head-wise"]
    assert all(line.split(": ")[1].split(" ")[1] == "tokens" for line in lines[1:4])
    assert "context window is 131,072 tokens" in lines[-1]
    assert main(argv) == 2  # without the memory sizes: a usage error that says what to add
    assert "--gpu-memory SIZE and --host-ram SIZE" in capsys.readouterr().err


def test_an_unknown_dtype_is_refused_by_name_and_float16_counts_two_bytes(capsys):
    """`--dtype fp16` raised a KeyError traceback from the bytes-per-element lookup."""
    argv = ["bench", "--plan-only", "--max-context", "--model", "synthetic:llama3.1-8b",
            "--gpu-memory", "24GB", "--host-ram", "64GB"]  # fmt: skip
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--dtype", "fp16"])
    assert stop.value.code == 2
    assert "argument --dtype: invalid choice: 'fp16' (choose from" in capsys.readouterr().err
    assert main([*argv, "--dtype", "float16"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("synthetic:llama3.1-8b (float16): weights ")
    assert main([*argv]) == 0  # --plan-only's default, bfloat16, is two bytes too: the same figures
    assert capsys.readouterr().out.splitlines()[0] == header.replace("(float16)", "(bfloat16)")
