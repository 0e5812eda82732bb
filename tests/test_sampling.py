"""The batched sampler draws from `logits_to_probs`, its draws are keyed, and the delimiter tail check is exact."""

from __future__ import annotations

import pytest
import torch

from engine.rng import CandidateStream, child_stream, root_stream, uniforms
from engine.runner import delimiter_reached
from engine.sampling import candidate_generator, logits_to_probs, sample_tokens, token_stats

PROBS = torch.tensor([0.5, 0.3, 0.1, 0.06, 0.04])
DRAWS = 20_000
CHI2_4_DOF_P001 = 18.47  # chi-square critical value, 4 degrees of freedom, p = 0.001


def many_draws(n: int, seed: int = 0) -> torch.Tensor:
    """n draws, one per candidate at position 0: [n]."""
    return uniforms([candidate_generator(seed, c) for c in range(n)], [0] * n, 1)[:, 0]


def counts(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.bincount(tokens, minlength=vocab).double()


def chi_square(observed: torch.Tensor, expected_probs: torch.Tensor) -> float:
    keep = expected_probs > 0
    expected = expected_probs[keep].double() * observed.sum()
    return float(((observed[keep] - expected) ** 2 / expected).sum())


def test_draws_are_in_the_open_closed_unit_interval_and_keyed_by_position():
    streams = [candidate_generator(3, c) for c in (1, 2, 7)]
    block = uniforms(streams, [10, 0, 5], 6)  # [3, 6]
    assert block.dtype == torch.float32 and block.shape == (3, 6)
    assert bool((block > 0).all()) and bool((block <= 1).all())
    for j in range(6):  # column j is the draw at position p + j, whatever the block it came in
        torch.testing.assert_close(block[:, j], uniforms(streams, [10 + j, j, 5 + j], 1)[:, 0], rtol=0, atol=0)
    assert not torch.equal(uniforms(streams, [10, 0, 5], 6), uniforms([candidate_generator(4, 1)] * 3, [10, 0, 5], 6))


def test_streams_follow_the_tree_and_a_first_child_continues_its_parent():
    """Keys come from (parent's key, child index), never from ids given at selection; child 0 shares its
    parent's key, so the draws its parent's row makes past its step are the ones the child will use."""
    root = root_stream(5)
    assert root == root_stream(5) and root != root_stream(6)
    first, second = child_stream(root, 0), child_stream(root, 1)
    assert first == root and second == child_stream(root, 1) and second != root
    keys = {child_stream(parent, k).key for parent in (root, second) for k in range(1, 50)}
    assert len(keys) == 98  # no two siblings or cousins share a stream
    past_step = uniforms([root], [10], 4)[0, 2:]  # the parent's draws for positions 12, 13
    torch.testing.assert_close(uniforms([first], [12], 2)[0], past_step, rtol=0, atol=0)
    assert isinstance(root, CandidateStream)


def test_a_torch_generator_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match="CandidateStream"):
        uniforms([torch.Generator()], [0], 1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_empirical_distribution_matches_the_probabilities(temperature):
    logits = PROBS.log().expand(DRAWS, -1).contiguous()  # [N, 5]
    tokens = sample_tokens(logits, many_draws(DRAWS), temperature, 1.0)
    want = logits_to_probs(PROBS.log(), temperature, 1.0)
    assert chi_square(counts(tokens, 5), want) < CHI2_4_DOF_P001


def test_top_p_excludes_the_tail_and_renormalises():
    logits = PROBS.log().expand(DRAWS, -1).contiguous()
    tokens = sample_tokens(logits, many_draws(DRAWS, seed=1), 1.0, 0.75)
    observed = counts(tokens, 5)
    assert observed[2:].sum() == 0  # 0.5 + 0.3 reaches 0.75: tokens 2..4 are outside
    want = logits_to_probs(PROBS.log(), 1.0, 0.75)
    torch.testing.assert_close(want, torch.tensor([0.625, 0.375, 0.0, 0.0, 0.0]))
    assert chi_square(observed, want) < CHI2_4_DOF_P001


def test_top_p_keeps_the_earlier_of_two_tied_tokens_at_its_edge():
    """A tie at the nucleus's edge goes to the lower token id (a stable sort), in the reference as in the sampler."""
    logits = torch.tensor([0.4, 0.3, 0.3]).log()
    want = logits_to_probs(logits, 1.0, 0.5)
    torch.testing.assert_close(want, torch.tensor([4 / 7, 3 / 7, 0.0]))
    tokens = sample_tokens(logits.expand(2000, -1).contiguous(), many_draws(2000, seed=2), 1.0, 0.5)
    assert set(tokens.tolist()) == {0, 1}


def test_extreme_draws_never_pick_a_zero_probability_token():
    logits = torch.tensor([[0.0, 0.0, -float("inf"), 1.0, -float("inf")]] * 3)
    draws = torch.tensor([2.0**-24, 0.5, 1.0])
    tokens = sample_tokens(logits, draws, 1.0, 1.0)
    assert set(tokens.tolist()) <= {0, 1, 3}
    assert sample_tokens(logits, draws, 1.0, 0.5).tolist() == [3, 3, 3]  # top-p keeps the single top token


def test_greedy_at_temperature_zero_and_log_probs_at_temperature_one():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 2.9]])
    tokens = sample_tokens(logits, torch.tensor([0.99, 0.01]), 0.0, 0.9)
    assert tokens.tolist() == [1, 0]
    torch.testing.assert_close(token_stats(logits, tokens)[0], torch.log_softmax(logits, -1)[[0, 1], [1, 0]])
    sampled, top1 = token_stats(logits, torch.tensor([0, 2]))  # not the top tokens
    torch.testing.assert_close(sampled, torch.log_softmax(logits, -1)[[0, 1], [0, 2]])
    torch.testing.assert_close(top1, torch.softmax(logits, -1).max(-1).values)


def test_a_row_samples_the_same_token_whatever_its_batch():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0))
    draws = many_draws(6)
    together = sample_tokens(logits, draws, 0.8, 0.9)
    alone = [int(sample_tokens(logits[i : i + 1], draws[i : i + 1], 0.8, 0.9)) for i in range(6)]
    assert together.tolist() == alone


# -- the delimiter tail check ---------------------------------------------------------------------


def first_stop(tokens: list[int], stop) -> int | None:
    """Index of the first token after which `stop(tokens[: i + 1])` holds, as the decode loop checks it."""
    return next((i for i in range(len(tokens)) if stop(tokens[: i + 1])), None)


def delimiter_pieces(encode, delimiter: str, generator: torch.Generator) -> list[int]:
    """The delimiter as tokens: whole, one character per token, or with special tokens (decode to '') inside."""
    how = int(torch.randint(3, (1,), generator=generator))
    if how == 0:
        return encode(delimiter)
    tokens = [t for ch in delimiter for t in [*encode(ch), *([0, 2] if how == 2 else [])]]
    return tokens


def sequences(tokenizer, delimiter: str, count: int, length: int, seed: int) -> list[list[int]]:
    """Random filler around near misses (a prefix of the delimiter) and, in most runs, the delimiter itself."""
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    generator = torch.Generator().manual_seed(seed)
    runs = []
    for _ in range(count):
        filler = lambda n: torch.randint(0, len(tokenizer), (n,), generator=generator).tolist()  # noqa: E731
        near_miss = encode(delimiter[: max(1, len(delimiter) // 2)]) if len(delimiter) > 1 else []
        tokens = filler(length // 3) + near_miss + filler(length // 3)
        if int(torch.randint(4, (1,), generator=generator)):
            tokens += delimiter_pieces(encode, delimiter, generator)
        runs.append(tokens + filler(length // 3))
    return runs


@pytest.mark.parametrize("delimiter", [" ", "\n\n", ". ", "The answer", "is:", "\n"])
def test_tail_check_stops_where_the_whole_text_check_stops(tiny, delimiter):
    decode = tiny.decode
    stopped = 0
    for tokens in sequences(tiny.tokenizer, delimiter, count=60, length=48, seed=len(delimiter)):
        want = first_stop(tokens, lambda ids: delimiter in decode(ids))
        assert first_stop(tokens, lambda ids: delimiter_reached(ids, delimiter, decode)) == want, tokens
        stopped += want is not None
    assert stopped >= 10, "too few sequences reach the delimiter to test anything"


def test_tail_check_sees_a_delimiter_built_from_single_bytes(tiny):
    """Byte-level tokens: a two-byte character split over tokens, then the delimiter one byte per token."""
    decode, encode = tiny.decode, tiny.tokenizer.encode
    tokens = encode("é", add_special_tokens=False) + [0, 1] + encode("\n", add_special_tokens=False) * 2
    assert first_stop(tokens, lambda ids: delimiter_reached(ids, "\n\n", decode)) == len(tokens) - 1


def test_a_rounding_difference_in_the_logits_changes_a_token_only_for_draws_at_a_boundary():
    """Two policies' logits differ by float32 rounding (other batch shapes). Over probabilities sorted by size
    two near-equal tokens could swap places and every draw landing in either would pick the other; in
    vocabulary order each token's interval moves by the rounding alone, so almost no draw changes token."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 64, generator=generator)
    logits[0, 40] = logits[0, 7] = 0.5  # a tie, broken either way by rounding
    above, below = logits.clone(), logits.clone()
    above[0, 40] += 1e-6
    below[0, 7] += 1e-6
    draws = torch.linspace(1e-4, 1.0, 2001)
    for top_p in (1.0, 0.9):
        first = sample_tokens(above.expand(len(draws), -1), draws, 1.0, top_p)
        second = sample_tokens(below.expand(len(draws), -1), draws, 1.0, top_p)
        assert (first != second).sum() <= 1  # at most the draw that sits on the moved boundary
