"""Benchmark: a sampling backend through the pipeline vs the bare engine on the same prompts and seeds.

Both sides run in this process on the same prompts (arithmetic, rendered with the bundled
arithmetic template), the same model and sampling settings, and the same seeds, so they generate
the same tokens; the ratio isolates the pipeline's overhead (prompt preparation, seed derivation,
row building, the Arrow table). Rounds alternate between the two sides and the best round of each
is kept.

- ``--backend vllm``: the pipeline's ``VllmSampler`` vs a bare ``LLM.generate`` on the same engine
  object (one engine: the same weights, settings and memory on both sides), with the prompts
  rendered by the model's chat template and one ``SamplingParams(n, seed)`` per prompt, seeded as
  the pipeline seeds it (target: pipeline / bare >= 0.95). Without ``--model`` and without CUDA:
  the bundled model, converted for vLLM's CPU build (``difficulty models prepare``).
- ``--backend xllamacpp`` (default): the pipeline's ``XLlamaCppSampler`` (``--parallel K`` server
  slots) vs a bare loop of ``Server.handle_chat_completions`` calls, one at a time, on the sampler's
  own server: the pipeline's overhead (target: pipeline / bare >= 0.9 with one slot), and with K > 1
  what the slots gain.

    python bench/sampling.py [--backend xllamacpp|vllm] [--model M] [--prompts 8] [--n 4]
                             [--max-tokens 64] [--threads N] [--rounds 3] [--parallel K]

Prints tokens per second of each side, whether the completions are identical, and their ratio.
"""

from __future__ import annotations

import argparse
import random
import time

from pipeline.sample import SamplingParams, derive_seed, make_sampler, render_prompt, template_for
from pipeline.sample.gguf import default_threads


def arithmetic_problems(count: int, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        op = rng.choice(["+", "-", "*"])
        out.append({"prompt_id": f"bench-{i}", "problem": f"{a} {op} {b}"})
    return out


def bare_server_loop(server, problems, template, params: SamplingParams) -> tuple[int, list[str]]:
    """The xllamacpp baseline: the in-process server's chat requests in a plain loop, same settings."""
    tokens, texts = 0, []
    for p in problems:
        msgs = [{"role": "user", "content": render_prompt(template, p["problem"])}]
        for idx in range(params.n):
            out = server.handle_chat_completions(
                {
                    "messages": msgs,
                    "temperature": params.temperature,
                    "top_p": params.top_p,
                    "top_k": 0,
                    "min_p": 0.0,
                    "repeat_penalty": 1.0,
                    "max_tokens": params.max_tokens,
                    "seed": derive_seed(params.seed, p["prompt_id"], idx),
                }
            )
            tokens += out["usage"]["completion_tokens"]
            texts.append(out["choices"][0]["message"]["content"] or "")
    return tokens, texts


def bare_generate(llm, problems, template, params: SamplingParams) -> tuple[int, list[str]]:
    """The vLLM baseline: the chat template applied by hand, then one bare `LLM.generate` call."""
    import vllm
    from vllm.inputs import TokensPrompt

    tokenizer = llm.get_tokenizer()
    prompts = []
    for p in problems:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": render_prompt(template, p["problem"])}],
            tokenize=False,
            add_generation_prompt=True,
        )
        # The template writes the special tokens itself, as LLM.chat tokenizes it.
        prompts.append(TokensPrompt(prompt_token_ids=tokenizer(text, add_special_tokens=False)["input_ids"]))
    sampling = [
        vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            seed=derive_seed(params.seed, p["prompt_id"], params.first_idx),
        )
        for p in problems
    ]
    outputs = llm.generate(prompts, sampling, use_tqdm=False)
    tokens, texts = 0, []
    for out in outputs:
        for comp in sorted(out.outputs, key=lambda c: c.index):
            tokens += len(comp.token_ids)
            texts.append(comp.text)
    return tokens, texts


def run_rounds(args, sample_pipeline, sample_bare) -> tuple[float, float, bool, int]:
    """Alternate the two sides for ``args.rounds`` rounds, the side that goes first alternating too
    (a drift in the machine's load then favours neither); best tokens/s of each, identical texts."""
    best_pipe = best_bare = 0.0
    same = True
    pipe_tokens = 0

    def timed(fn):
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0

    for r in range(args.rounds):
        if r % 2 == 0:
            (table, t_pipe), ((bare_tokens, bare_texts), t_bare) = timed(sample_pipeline), timed(sample_bare)
        else:
            ((bare_tokens, bare_texts), t_bare), (table, t_pipe) = timed(sample_bare), timed(sample_pipeline)
        pipe_tokens = sum(table.column("n_tokens").to_pylist())

        same = same and table.column("completion").to_pylist() == bare_texts and pipe_tokens == bare_tokens
        tps_pipe, tps_bare = pipe_tokens / t_pipe, bare_tokens / t_bare
        best_pipe, best_bare = max(best_pipe, tps_pipe), max(best_bare, tps_bare)
        print(
            f"round {r + 1}: pipeline {pipe_tokens} tok in {t_pipe:.2f}s = {tps_pipe:.1f} tok/s; "
            f"bare {bare_tokens} tok in {t_bare:.2f}s = {tps_bare:.1f} tok/s",
            flush=True,
        )
    return best_pipe, best_bare, same, pipe_tokens


def main_vllm(args) -> None:
    params = SamplingParams(n=args.n, temperature=args.temperature, max_tokens=args.max_tokens, seed=1)
    problems = arithmetic_problems(args.prompts)
    template = template_for("arithmetic")
    t0 = time.perf_counter()
    sampler = make_sampler("vllm", args.model)
    print(f"engine: {sampler.model_name} on {sampler.device}, started in {time.perf_counter() - t0:.1f}s")
    print(f"engine settings: {sampler.options.llm_args(sampler.device)}")
    llm = sampler.llm
    # Warm-up: the first step of a fresh engine allocates its buffers; both sides share the engine.
    sampler.sample(problems[:1], SamplingParams(n=1, max_tokens=8), template=template)
    bare_generate(llm, problems[:1], template, SamplingParams(n=1, max_tokens=8))

    best_pipe, best_bare, same, pipe_tokens = run_rounds(
        args,
        lambda: sampler.sample(problems, params, template=template),
        lambda: bare_generate(llm, problems, template, params),
    )
    samples = args.prompts * args.n
    print(
        f"settings: {args.prompts} prompts x n={args.n}, max_tokens={args.max_tokens}, "
        f"temperature={args.temperature}, one engine shared by both sides"
    )
    print(f"identical completions on both sides: {same}")
    print(f"pipeline: {best_pipe:.1f} tok/s  bare LLM.generate: {best_bare:.1f} tok/s")
    print(f"mean tokens per sample: {pipe_tokens / samples:.1f}")
    print(f"ratio pipeline/bare: {best_pipe / best_bare:.3f} (target >= 0.95)")
    sampler.close()


def main_xllamacpp(args) -> None:
    threads = args.threads or default_threads()
    params = SamplingParams(n=args.n, temperature=args.temperature, max_tokens=args.max_tokens, seed=1)
    problems = arithmetic_problems(args.prompts)
    template = template_for("arithmetic")
    sampler = make_sampler("xllamacpp", None, n_threads=threads, n_ctx=args.n_ctx, parallel=args.parallel)

    def bare(ps, params):
        return bare_server_loop(sampler.server, ps, template, params)

    label = "bare handle_chat_completions"
    # Warm-up: page the weights in on both sides.
    sampler.sample(problems[:1], SamplingParams(n=1, max_tokens=8), template=template)
    bare(problems[:1], SamplingParams(n=1, max_tokens=8))

    best_pipe, best_bare, same, pipe_tokens = run_rounds(
        args, lambda: sampler.sample(problems, params, template=template), lambda: bare(problems, params)
    )
    samples = args.prompts * args.n
    print(
        f"settings: {args.prompts} prompts x n={args.n}, max_tokens={args.max_tokens}, "
        f"temperature={args.temperature}, threads={threads}, n_ctx={args.n_ctx}, parallel={args.parallel}"
    )
    print(f"identical completions on both sides: {same}")
    print(f"pipeline (xllamacpp): {best_pipe:.1f} tok/s  {label}: {best_bare:.1f} tok/s")
    print(f"mean tokens per sample: {pipe_tokens / samples:.1f}")
    print(f"ratio pipeline/bare: {best_pipe / best_bare:.3f}")
    sampler.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("xllamacpp", "vllm"), default="xllamacpp")
    ap.add_argument("--model", default=None, help="vllm: a model name or folder (default: the bundled model on CPU)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=1, help="xllamacpp: server slots")
    args = ap.parse_args()
    if args.backend == "vllm":
        main_vllm(args)
        return
    main_xllamacpp(args)


if __name__ == "__main__":
    main()
