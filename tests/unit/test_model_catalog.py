"""The checkpoint catalog (FIELD_NOTES.md section 1) and the fit check."""

from __future__ import annotations

import pytest

from gx10.model import (
    CATALOG,
    USABLE_GB_PER_NODE,
    CatalogError,
    PlanDoesNotFitError,
    check_fits,
    lookup,
)

# The field notes' table: checkpoint -> (size GB, fits one node).
FIELD_NOTES = {
    "deepseek-v4-flash-fp8": (166.9, False),
    "deepseek-v4-flash-mxfp4-gguf": (156.0, False),
    "deepseek-v4-flash-q4_k-abliterated": (164.6, False),
    "deepseek-v4-flash-ud-q2_k_xl": (90.0, True),
    "deepseek-v4-flash-ud-q3-q8_k_xl": (245.0, False),
}


def test_catalog_matches_the_field_notes() -> None:
    assert {e.name: (e.size_gb, e.fits_one_node()) for e in CATALOG} == FIELD_NOTES
    chosen = lookup("deepseek-ai/DeepSeek-V4-Flash-0731")
    assert chosen.decision == "chosen"
    assert chosen.revision == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"


def test_fp8_on_one_node_is_refused_with_the_numbers() -> None:
    with pytest.raises(PlanDoesNotFitError) as caught:
        check_fits(lookup("deepseek-v4-flash-fp8"), 1, USABLE_GB_PER_NODE)
    assert str(caught.value) == (
        "deepseek-v4-flash-fp8 (166.9 GB) does not fit on 1 node: 166.9 GB of weights per node, "
        "121.0 GB usable per node (short by 45.9 GB); it needs at least 2 nodes"
    )


def test_fp8_on_two_nodes_fits() -> None:
    report = check_fits(lookup("deepseek-v4-flash-fp8"), 2, 121.0)
    assert report.per_node_gb == pytest.approx(83.45)
    assert report.free_gb_per_node == pytest.approx(37.55)


def test_reserve_is_in_the_message() -> None:
    with pytest.raises(PlanDoesNotFitError, match=r"minus 40\.0 GB reserved = 81\.0 GB"):
        check_fits(lookup("deepseek-v4-flash-fp8"), 2, 121.0, reserve_gb_per_node=40.0)


def test_family_of_variants_counts_its_largest() -> None:
    with pytest.raises(PlanDoesNotFitError) as caught:
        check_fits(lookup("deepseek-v4-flash-ud-q3-q8_k_xl"), 2)
    assert "(178-245 GB; the largest variant counts)" in str(caught.value)
    assert "122.5 GB of weights per node" in str(caught.value)
    assert "at least 3 nodes" in str(caught.value)


def test_q2_fits_one_node() -> None:
    assert check_fits(lookup("deepseek-v4-flash-ud-q2_k_xl"), 1).free_gb_per_node == 31.0


def test_bad_plans() -> None:
    with pytest.raises(PlanDoesNotFitError, match="at least 1 node"):
        check_fits(CATALOG[0], 0)
    with pytest.raises(CatalogError, match=r"unknown checkpoint 'llama'.*deepseek-v4-flash-fp8"):
        lookup("llama")
