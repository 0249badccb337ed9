import pytest

from infra.promote.health import Verdict, judge


@pytest.mark.parametrize(
    ("requests", "errors", "verdict"),
    [
        (1000, 0, Verdict.HEALTHY),
        (1000, 10, Verdict.HEALTHY),  # exactly at the limit
        (1000, 11, Verdict.UNHEALTHY),
        (99, 0, Verdict.INCONCLUSIVE),  # too few requests is never a pass
        (0, 0, Verdict.INCONCLUSIVE),
        (50, 1, Verdict.INCONCLUSIVE),  # one error in a small sample proves nothing yet
        (50, 2, Verdict.UNHEALTHY),  # already over 1% of the whole minimum sample
        (100, 2, Verdict.UNHEALTHY),
    ],
)
def test_judge(requests, errors, verdict):
    assert judge(requests, errors, min_requests=100, max_error_ratio=0.01).verdict is verdict


def test_impossible_counts_are_refused():
    with pytest.raises(ValueError, match="impossible counts"):
        judge(10, 11, min_requests=1, max_error_ratio=0.01)


def test_describe_names_the_ratio():
    assert judge(200, 4, 100, 0.01).describe() == "unhealthy: 4 5xx of 200 requests (2.00%)"
