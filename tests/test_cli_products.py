"""``bnsym products``: its JSON equals bnsym.api's products functions, bad input is one line on stderr."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_cli as _run

from bnsym import api


def test_products_json_equals_the_api(capsys):
    status, out, err = _run(capsys, ["products", "--factors", "3", "--moments", "5", "--x", "0,0.5,2,20", "--json"])
    assert status == 0 and err == ""
    result = json.loads(out)
    edges = api.fuss_catalan_edges(3)
    assert result["soft_edge"] == edges["soft"]
    assert result["hard_edge"] == {"coefficient": edges["hard_coefficient"], "exponent": edges["hard_exponent"]}
    assert result["moments"] == {str(k): api.fuss_catalan_moment(k, 3) for k in range(6)}
    rho = api.fuss_catalan_density([0.5, 2.0, 20.0], 3)
    assert result["density"]["rho"] == [None, *rho.tolist()]  # rho(0) is infinite: null in JSON


def test_products_matrix_files(capsys, tmp_path):
    rng = np.random.default_rng(5)
    factors, abar, x = rng.standard_normal((2, 3, 8, 8)), rng.standard_normal((4, 5)), rng.standard_normal((5, 6))
    np.save(tmp_path / "factors.npy", factors)
    np.save(tmp_path / "abar.npy", abar)
    np.savetxt(tmp_path / "x.txt", x)
    status, out, err = _run(capsys, ["products", "--condition", str(tmp_path / "factors.npy"), "--max-lr",
                                     str(tmp_path / "abar.npy"), str(tmp_path / "x.txt"), "--json"])
    assert status == 0 and err == ""
    result = json.loads(out)
    assert result["log_condition_number"] == api.log_condition_number(factors).tolist()
    assert result["max_stable_lr"] == pytest.approx(api.max_stable_lr(abar, x), rel=1e-15)


def test_products_text_names_every_json_quantity(capsys):
    _, out, _ = _run(capsys, ["products", "--factors", "2", "--json"])
    names = set(json.loads(out))
    _, text, _ = _run(capsys, ["products", "--factors", "2"])
    assert {line.split(" ")[0].rstrip(":") for line in text.splitlines()} == names


@pytest.mark.parametrize("argv, match", [
    ([], "needs --factors"),
    (["--x", "1"], "--x needs --factors"),
    (["--factors", "0"], "between 1 and"),
    (["--factors", "2.5"], "whole number"),
    (["--factors", "2", "--moments", "99"], "between 0 and 50"),
    (["--factors", "2", "--x", "1,abc"], "must be a number"),
    (["--factors", "2", "--x", "nan"], "finite"),
    (["--condition", "/nonexistent/factors.npy"], "cannot read"),
])
def test_products_bad_input_is_one_line_on_stderr(capsys, argv, match):
    status, out, err = _run(capsys, ["products", *argv])
    assert status == 2 and out == ""
    assert err.startswith("bnsym: error: ") and err.count("\n") == 1 and match in err
