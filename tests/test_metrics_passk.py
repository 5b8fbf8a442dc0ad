import math
import random
from fractions import Fraction

import pytest

from zoopt.metrics import pass_at_k, pass_at_k_table


def exact(n, c, k):
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_matches_exact_combinatorial_formula_on_random_cases():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 256)
        c = rng.randint(0, n)
        k = rng.randint(1, n)
        assert abs(pass_at_k(n, c, k) - float(exact(n, c, k))) < 1e-12, (n, c, k)


def test_edge_cases():
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 10, 3) == 1.0
    assert pass_at_k(10, 1, 10) == 1.0           # k = n: any correct ⇒ 1
    assert pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16, abs=1e-15)
    # hand value: n=4, c=2, k=2 ⇒ 1 − C(2,2)/C(4,2) = 1 − 1/6
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6, abs=1e-15)


@pytest.mark.parametrize("n,c,k,bad", [(4, 1, 5, "k=5"), (4, 1, 0, "k=0"), (4, 5, 1, "c=5"),
                                       (4, -1, 1, "c=-1"), (0, 0, 1, "n=0")])
def test_errors_name_the_bad_value(n, c, k, bad):
    with pytest.raises(ValueError, match=bad):
        pass_at_k(n, c, k)


def test_table_averages_over_problems():
    table = pass_at_k_table([(4, 0), (4, 2), (4, 4)], ks=(1, 2))
    assert table[1] == pytest.approx((0 + 0.5 + 1) / 3)
    assert table[2] == pytest.approx((0 + 5 / 6 + 1) / 3)
