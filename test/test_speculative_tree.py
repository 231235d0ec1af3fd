"""Draft trees and their greedy verification: pure functions, no models."""

import pytest
import torch

from crossspec_ros.speculative.tree import ROOT, DraftTree
from crossspec_ros.speculative.verify import verify_greedy, verify_greedy_tree


def logits_choosing(tokens: list[int], vocab: int = 10) -> torch.Tensor:
    rows = torch.full((len(tokens), vocab), -5.0)
    for i, t in enumerate(tokens):
        rows[i, t] = 5.0
    return rows


def two_branch_tree() -> DraftTree:
    tree = DraftTree()
    tree.add_chain([1, 2, 3], "history_ngram", [0.9, 0.8, 0.7])   # nodes 0, 1, 2
    tree.add_chain([4, 5], "draft_stream", [0.5, 0.4])           # nodes 3, 4
    tree.add(0, 6, "history_ngram", 0.3)                         # node 5: 1 -> 6
    return tree


def test_shared_prefixes_are_stored_once_and_keep_the_first_source():
    tree = DraftTree()
    tree.add_chain([1, 2, 3], "history_ngram", [0.9, 0.8, 0.7])
    nodes = tree.add_chain([1, 2, 4], "draft_stream", [0.95, 0.5, 0.4])
    assert len(tree) == 4 and nodes[:2] == [0, 1]
    assert tree.sources[:2] == ["history_ngram", "history_ngram"]
    assert tree.probs[0] == 0.95  # the higher estimate wins
    assert tree.parents == [ROOT, 0, 1, 1]


def test_greedy_tree_verification_follows_the_verifiers_argmax_down_one_branch():
    tree = two_branch_tree()
    # fed: pending, nodes 0..5; the verifier wants 1, then 6, then 9 (no such child)
    wanted = {0: 1, 1: 6, 6: 9}
    rows = logits_choosing([wanted.get(i, 0) for i in range(len(tree) + 1)])
    verdict = verify_greedy_tree(tree.tokens, tree.parents, rows)
    assert verdict.path == (0, 5)
    assert verdict.confirmed(tree.tokens) == [1, 6, 9]


def test_a_chain_verifies_exactly_like_the_chain_rule():
    tree = DraftTree()
    tree.add_chain([3, 4, 5, 6], "draft_stream", [0.5] * 4)
    for wanted in ([3, 4, 7, 0, 0], [3, 4, 5, 6, 8], [1, 0, 0, 0, 0]):
        rows = logits_choosing(wanted)
        chain = verify_greedy([3, 4, 5, 6], rows)
        tree_verdict = verify_greedy_tree(tree.tokens, tree.parents, rows)
        assert tree_verdict.confirmed(tree.tokens) == chain.confirmed([3, 4, 5, 6])


def test_tree_verification_rejects_logits_of_the_wrong_shape():
    tree = two_branch_tree()
    with pytest.raises(ValueError, match="1 \\+ 6"):
        verify_greedy_tree(tree.tokens, tree.parents, torch.zeros(3, 10))


def test_best_chain_maximises_expected_accepted_tokens_not_the_leaf_probability():
    tree = DraftTree()
    tree.add_chain([1], "a", [0.6])
    tree.add_chain([2, 3, 4], "b", [0.5, 0.45, 0.4])
    assert tree.best_chain() == [2, 3, 4]  # 1.35 expected tokens against 0.6


def test_pruning_keeps_the_most_probable_nodes_with_their_ancestors():
    tree = two_branch_tree()
    pruned = tree.pruned(3)
    assert pruned.tokens == [1, 2, 3]
    assert pruned.parents == [ROOT, 0, 1]
    assert tree.pruned(100) is tree
    assert len(tree.pruned(0)) == 0


def test_depth_first_order_puts_the_likeliest_path_first_and_keeps_the_tree():
    tree = DraftTree()
    tree.add(ROOT, 4, "b", 0.3)                                  # node 0: the weaker branch
    tree.add_chain([1, 2], "a", [0.9, 0.5])                      # nodes 1, 2
    tree.add(1, 6, "a", 0.7)                                     # node 3: 1 -> 6 beats 1 -> 2
    tree.add(0, 5, "b", 0.2)                                     # node 4: 4 -> 5
    ordered = tree.depth_first()
    assert ordered.tokens == [1, 6, 2, 4, 5]
    assert ordered.parents == [ROOT, 0, 0, ROOT, 3]
    assert ordered.probs == [0.9, 0.7, 0.5, 0.3, 0.2]

    def paths(t: DraftTree) -> set[tuple[int, ...]]:
        return {tuple(t.tokens[n] for n in t.path(node)) for node in range(len(t))}

    assert paths(ordered) == paths(tree) and len(ordered) == len(tree)


def test_a_node_needs_an_existing_parent():
    with pytest.raises(ValueError, match="parent 3"):
        DraftTree().add(3, 1, "x", 0.5)
