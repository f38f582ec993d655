"""The RNN scenario without a world: names, layout, the corpus, batches, the baseline."""

from __future__ import annotations

import pytest
import torch

from rpc_harness import WorldSpecError
from rpc_harness.scenarios import rnn

# Small enough that a world is about a second; still several epochs, both
# dropout paths and a two-layer LSTM.
SMALL = rnn.Config(sentences=120, epochs=3)


# -- no world -------------------------------------------------------------------


def test_names_and_layout():
    assert rnn.names(2) == ("ps", "trainer")
    assert rnn.names(3) == ("ps0", "ps1", "trainer")
    assert rnn.names(5) == ("ps0", "ps1", "trainer0", "trainer1", "trainer2")
    assert rnn.layout(2) == rnn.Layout("ps", "ps", ("ps",), ("trainer",))
    assert rnn.layout(3) == rnn.Layout("ps0", "ps1", ("ps0", "ps1"), ("trainer",))
    with pytest.raises(WorldSpecError, match="needs >= 2 ranks"):
        rnn.names(1)


def test_corpus_is_real_seeded_text():
    vocab, ids = rnn.corpus(SMALL, seed=7)
    again, ids_again = rnn.corpus(SMALL, seed=7)
    other, ids_other = rnn.corpus(SMALL, seed=8)
    assert (vocab, ids) == (again, ids_again)
    assert ids != ids_other
    assert len(vocab) == SMALL.vocab_size and vocab[:2] == [rnn.UNK, rnn.EOS]
    assert all(word.isalpha() for word in vocab[2:])
    assert all(0 <= i < SMALL.vocab_size for i in ids)
    assert ids.count(vocab.index(rnn.EOS)) == SMALL.sentences


def test_batches_are_next_word_targets():
    data = rnn.batches(SMALL, seed=3, trainer=0, trainers=1)
    assert len(data) >= 5
    # The stream, column by column, continues across chunk boundaries: the
    # target of every position is the input one row further down.
    inputs = torch.cat([x for x, _ in data])
    targets = torch.cat([y.view(x.shape) for x, y in data])
    assert inputs.shape[1] == SMALL.batch_size
    assert torch.equal(inputs[1:], targets[:-1])
    # Two trainers get the two halves of the same stream.
    _, ids = rnn.corpus(SMALL, seed=3)
    first = rnn.batches(SMALL, 3, 0, 2)[0][0]
    second = rnn.batches(SMALL, 3, 1, 2)[0][0]
    assert first[0, 0] == ids[0] and second[0, 0] == ids[len(ids) // 2]


def test_baseline_is_deterministic_and_learns():
    one = rnn.baseline(SMALL, 2, seed=11)["trainer"]["steps"]
    two = rnn.baseline(SMALL, 2, seed=11)["trainer"]["steps"]
    assert [float(s["loss"]) for s in one] == [float(s["loss"]) for s in two]
    means = rnn.epoch_means(one)
    assert means[-1] < means[0]


# -- real worlds ---------------------------------------------------------------------
