"""The numbers the README and docs quote are the numbers attnsim computes now
(scripts/docs_numbers.py recomputes each and looks for it where it is quoted)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def docs_numbers():
    spec = importlib.util.spec_from_file_location("docs_numbers", ROOT / "scripts/docs_numbers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("part", ["default", "large_noise", "figures"])
def test_quoted_numbers_match(docs_numbers, part):
    quotes = docs_numbers.PARTS[part]()
    assert len(quotes) >= 3
    wrong = [f"{name}: {q.what}: should say {q.text!r}" for q, name in docs_numbers.missing(quotes)]
    assert not wrong, "\n".join(wrong)


def test_a_stale_quote_is_found(docs_numbers, tmp_path, monkeypatch):
    """The check can fail: a README whose number moved is named with what it should say."""
    (tmp_path / "README.md").write_text("uniform attention (no training) errs 2.8e-7, and the same\n")
    monkeypatch.setattr(docs_numbers, "ROOT", tmp_path)
    q = docs_numbers.Quote("uniform attention", "errs 2.9e-7, and the same", ("README.md",))
    assert docs_numbers.missing([q]) == [(q, "README.md")]
    assert docs_numbers.sci(1.78e-4) == "1.8e-4" and docs_numbers.sci(5.33e-9, 1) == "5e-9"


@pytest.mark.slow
def test_readme_test_count(docs_numbers):
    (q,) = docs_numbers.test_count()
    assert not docs_numbers.missing([q]), f"README.md should say {q.text!r} (the suite's count now)"
