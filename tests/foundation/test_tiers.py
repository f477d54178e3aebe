"""tests/tiers.py's table is checked against every whole-suite collection (tests/conftest.py):
a renamed test or sibling stops the run instead of silently leaving a variant untested."""
import tiers


def test_the_table_is_refused_when_an_entry_or_a_sibling_is_not_a_test_or_a_sibling_is_full_only():
    everything = [e.test for e in tiers.FULL_ONLY] + [e.sibling for e in tiers.FULL_ONLY]
    assert tiers.check(everything) == []
    first = tiers.FULL_ONLY[0]
    problems = tiers.check([n for n in everything if n != first.test])
    assert problems == [f"{first.test} matches no test"]
    problems = tiers.check([n for n in everything if n != first.sibling])
    assert any(first.sibling in p and "is not a test" in p for p in problems), problems
    renamed = tiers.FullOnly(first.test, tiers.FULL_ONLY[1].test, "a sibling in the full tier")
    tiers.FULL_ONLY.append(renamed)
    try:
        assert any("is in the full tier too" in p for p in tiers.check(everything))
    finally:
        tiers.FULL_ONLY.remove(renamed)


def test_a_parametrised_family_is_matched_by_its_prefix_and_nothing_else():
    entry = tiers.FullOnly("tests/x.py::test_y", "tests/x.py::test_z", "why")
    assert tiers.full_only_entry(entry, "tests/x.py::test_y[a-b]")
    assert tiers.full_only_entry(entry, "tests/x.py::test_y")
    assert not tiers.full_only_entry(entry, "tests/x.py::test_y_other")
