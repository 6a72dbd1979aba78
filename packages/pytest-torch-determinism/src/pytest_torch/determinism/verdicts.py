"""The verdicts of a diagnosis: the name of each cause, and the sentence that says what
the experiments showed and what to do."""

from __future__ import annotations

from pytest_torch.determinism import cublas, options
from pytest_torch.determinism.probes import RandomSource, pattern_name

DETERMINISTIC = "Deterministic"
RANDOMNESS = "Randomness-driven"
KERNEL = "Kernel-level"
UNINITIALISED = "Uninitialised memory"
STATE = "State mutation"
INPUTS = "Changes its inputs"
OUTSIDE = "Outside torch"
INCONCLUSIVE = "Inconclusive"


def inputs_verdict(changed: list[str]) -> str:
    return (
        f"{INPUTS}: the outputs change because the call writes into its own inputs in place"
        f" ({', '.join(changed)}), so no two calls get the same inputs; with the original"
        f" inputs restored before each run the outputs are identical. Compute out of place"
        f" (x = x + y instead of x += y, x.add(y) instead of x.add_(y)), or pass a copy"
        f" (x.clone()) when the caller needs its tensor unchanged."
    )


def state_verdict(changed: list[str], changed_inputs: list[str]) -> str:
    statistics = any("running_" in name or "num_batches_tracked" in name for name in changed)
    advice = (
        " Call model.eval() to use the running statistics (BatchNorm) without updating them,"
        " or reset the state before each call."
        if statistics
        else " Reset that state before each call, or keep it out of the forward pass."
    )
    inputs = (
        f" (The call also writes into its inputs, {', '.join(changed_inputs)}; restoring"
        f" only those was not enough.)"
        if changed_inputs
        else ""
    )
    return (
        f"{STATE}: the outputs change because the call changes the model's own state"
        f" ({', '.join(changed)}); with that state restored before each run they are"
        f" identical.{advice}{inputs}"
    )


def random_verdict(seen: list[RandomSource]) -> str:
    ops = (
        f" Random ops seen: {', '.join(source.name for source in seen)}."
        if seen
        else " No random op of torch's ran: the randomness comes from Python's random or"
        " NumPy (reseeded too)."
    )
    advice: list[str] = []
    for source in seen:
        where = f" in {source.where}" if source.where else ""
        if source.dropout == "module":
            line = (
                " Seed before each call (the torch_seed fixture does), or call model.eval() to"
                " turn dropout off."
            )
        elif source.dropout == "functional":
            line = (
                f" {source.call}{where} drops elements at random although that module is in"
                f" eval mode: model.eval() does not affect a dropout function called with"
                f" training=True; pass training=self.training."
            )
        elif source.dropout == "functional-train":
            line = (
                f" {source.call}{where} drops elements at random: model.eval() turns it off"
                f" only if it is called with training=self.training (a literal training=True"
                f" is not affected by eval())."
            )
        elif source.dropout == "function":
            line = (
                f" {source.call} drops elements at random: pass training=False to turn it off,"
                f" or seed before each call (the torch_seed fixture does)."
            )
        else:
            continue
        if line not in advice:
            advice.append(line)
    others = [source for source in seen if source.dropout is None]
    if others:
        named = ", ".join(dict.fromkeys(source.name for source in others))
        advice.append(
            f" Seed before each call (the torch_seed fixture does), or draw from a seeded"
            f" torch.Generator (generator=..., where the op takes one): {named}."
        )
    elif not seen:
        advice.append(
            " Seed before each call: the torch_seed fixture seeds Python's, NumPy's and"
            " torch's generators."
        )
    return (
        f"{RANDOMNESS}: the variance disappears when the RNG is reseeded before each run."
        f"{ops}{''.join(advice)}"
    )


def unsupported_verdict(error: str) -> str:
    return (
        f"{KERNEL}: the variance stays when the RNG is reseeded, and {error} (torch refused"
        f" it with torch.use_deterministic_algorithms(True)), so {options.DETERMINISTIC}"
        f" cannot fix it. Replace that op with a deterministic equivalent, or compare the"
        f" outputs with a tolerance (atol/rtol)."
    )


def fixed_verdict() -> str:
    return (
        f"{KERNEL}: the variance stays when the RNG is reseeded and disappears with"
        f" torch.use_deterministic_algorithms(True): run the test with {options.DETERMINISTIC}"
        f" (it applies to tests using torch_seed), or switch deterministic algorithms on"
        f" yourself."
    )


def uninitialised_verdict(varies: bool) -> str:
    seen = "vary with what that memory held" if varies else "are identical only by luck"
    return (
        f"{UNINITIALISED}: the outputs read memory that was never written (torch.empty,"
        f" new_empty, empty_like): they change when that memory holds other bytes (the"
        f" diagnosis wrote {pattern_name(0)} into it in one run, {pattern_name(1)} in"
        f" another) and otherwise {seen}. Deterministic mode would only hide this behind"
        f" NaN fills: initialise the tensor (torch.zeros) or write every element before"
        f" reading it."
    )


def cublas_verdict() -> str:
    return (
        f"{INCONCLUSIVE}: the variance stays when the RNG is reseeded, and the experiment"
        f" with deterministic algorithms could not run: {cublas.refusal_explained()}, then"
        f" diagnose again to tell kernels from other causes."
    )


def outside_verdict() -> str:
    return (
        f"{OUTSIDE}: the variance stays with the RNG reseeded and with deterministic"
        f" algorithms on, so it comes from outside torch's kernels: Python-side state (a"
        f" counter, a cache), an unseeded source such as os.urandom, the time, threads, or"
        f" the order of the data. The first divergence says where it enters."
    )
