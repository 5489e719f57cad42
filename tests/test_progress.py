"""bnsym.core.progress: one switch for every progress bar (terminal and Lab yes, book and tests no)."""

import pytest

from bnsym.core.progress import PROGRESS_ENV, progress_bar, progress_enabled


@pytest.mark.parametrize("setting, expected", [("0", False), ("off", False), ("1", True), ("YES", True)])
def test_environment_decides(monkeypatch, setting, expected):
    monkeypatch.setenv(PROGRESS_ENV, setting)
    assert progress_enabled() is expected
    assert progress_bar(range(3), show=True).disable is not expected


def test_default_is_off_without_terminal_or_kernel(monkeypatch, capsys):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert not progress_enabled()  # pytest captures stderr: not a terminal, and no kernel runs here
    assert list(progress_bar(range(3))) == [0, 1, 2] and capsys.readouterr().err == ""


def test_show_false_wins(monkeypatch):
    monkeypatch.setenv(PROGRESS_ENV, "1")
    assert progress_bar(range(3), show=False).disable


def test_bad_setting_is_refused(monkeypatch):
    monkeypatch.setenv(PROGRESS_ENV, "maybe")
    with pytest.raises(ValueError, match=PROGRESS_ENV):
        progress_enabled()
