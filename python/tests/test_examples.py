"""The examples as a user runs them: each exits 0 only if `oac`'s final tables equal the plain
PyTorch loop run over oac's recorded order, bit for bit."""

import pathlib
import re
import subprocess
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
SMALL = ["--users", "200", "--items", "200", "--count", "12000", "--epochs", "4"]


def run_example(name, *args):
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=600)


def rmse(out, name):
    return float(re.search(rf"{name}: test RMSE ([0-9.]+)", out).group(1))


def test_the_recommender_s_oac_equals_the_plain_loop_over_its_order():
    p = run_example("recommender.py", *SMALL)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "oac == plain loop over oac's order, bit for bit: True" in p.stdout
    assert "sync == plain loop, bit for bit: True" in p.stdout
    # Popular items make batches share rows: oac repaired stale reads, so the check is not vacuous.
    replaced = int(re.search(r"validation replaced (\d+) stale row reads", p.stdout).group(1))
    assert replaced > 0, p.stdout
    # It learned: every mode beats predicting the training mean.
    mean_only = float(re.search(r"test RMSE of the mean alone ([0-9.]+)", p.stdout).group(1))
    for mode in ["plain", "sync", "oac"]:
        assert rmse(p.stdout, mode) < 0.9 * mean_only, p.stdout


def test_the_recommender_reads_a_csv_of_labelled_ratings_and_names_a_bad_line(tmp_path):
    good = tmp_path / "ratings.csv"
    lines = ["user,item,rating"] + [f"u{u},item-{(u * 7 + k) % 40},{1 + (u + k) % 5}" for u in range(60) for k in range(10)]
    good.write_text("\n".join(lines) + "\n")
    p = run_example("recommender.py", "--ratings", str(good), "--epochs", "2", "--rank", "4", "--batch-size", "32")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("60 users, 40 items, 540 training and 60 test ratings"), p.stdout

    bad = tmp_path / "bad.csv"
    bad.write_text("user,item,rating\nu1,i1,4\nu2,i1,four\n")
    p = run_example("recommender.py", "--ratings", str(bad))
    assert p.returncode == 2 and f"{bad}:3: the rating 'four' is not a number" in p.stderr, p.stderr


def test_torch_kge_with_rows_as_lent_tensors_equals_the_plain_loop():
    p = run_example("torch_kge.py", "--dataset", "umls", "--epochs", "2", "--rows", "torch")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "oac == plain loop over oac's order, bit for bit: True" in p.stdout
    assert "sync == plain loop, bit for bit: True" in p.stdout


def test_torch_kge_on_cuda_is_refused_before_anything_trains():
    p = run_example("torch_kge.py", "--dataset", "umls", "--device", "cuda")
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("torch_kge: device=\"cuda:0\": "), p.stderr
    assert "plain:" not in p.stdout, p.stdout


def test_the_bit_for_bit_check_names_the_first_differing_row():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from equivalence import first_difference, same_bits
    finally:
        sys.path.remove(str(EXAMPLES))
    import numpy as np

    a = np.zeros((6, 3), dtype=np.float32)
    a[2, 1] = np.nan
    b = a.copy()
    assert first_difference(a, b) is None and same_bits(a, b)  # NaN == NaN by bits
    b[4, 0], b[5, 2] = -0.0, 1.0  # -0.0 differs from 0.0 by bits
    assert first_difference(a, b) == "row 4" and not same_bits(a, b)
    assert first_difference({"u": a, "i": a}, {"u": a, "i": b}) == "table 'i' row 4"
    assert first_difference(a, b[:5]) == "shape (6, 3) vs (5, 3)"
    assert first_difference({"u": a}, {"i": a}) == "different tables"
