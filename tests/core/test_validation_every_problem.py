"""Every problem of a config in one answer: a section that does not parse skips only the checks that read
it, and an empty number is told to be left out (the form used to send it as "" and got a PyYAML hint)."""

from __future__ import annotations

from typing import Any

import pytest

from collapipe_core.config import ModelConfig
from collapipe_core.validation import ConfigError, parse_config
from tests.core.builders import tiny_config


def _problems(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as refused:
        parse_config(data)
    return {problem.field: problem.message for problem in refused.value.problems}


def test_a_typo_in_one_section_does_not_hide_the_problems_of_the_others() -> None:
    data = tiny_config().model_dump(mode="json", by_alias=True)
    data["training"]["lr"] = "0.0o3"  # pydantic refuses the training section
    data["data"]["dataset"] = "imagenet"  # a cross-field check of the data section
    data["scheduler"]["policy"] = "best-guess"  # the policy check
    problems = _problems(data)
    assert set(problems) == {"training.lr", "data.dataset", "scheduler.policy"}, problems
    assert "unknown dataset" in problems["data.dataset"]
    assert "not registered" in problems["scheduler.policy"]


def test_a_check_that_reads_a_broken_section_is_skipped_not_answered_about_its_defaults() -> None:
    data = tiny_config().model_dump(mode="json", by_alias=True)
    data["data"]["samples_per_cluster"] = "many"  # the micro-batch checks read data: they are skipped
    data["training"]["microbatch_size"] = 10**6
    data["channel"]["bandwidth_hz"] = -5.0
    data["scheduler"]["policy"] = "best-guess"  # reads no broken section: still checked
    problems = _problems(data)
    assert set(problems) == {"data.samples_per_cluster", "channel.bandwidth_hz", "scheduler.policy"}, problems


def test_an_empty_number_is_told_to_be_left_out() -> None:
    data = tiny_config().model_dump(mode="json", by_alias=True)
    data["model"]["d_model"] = ""
    data["training"]["lr"] = "  "
    problems = _problems(data)
    assert problems == {
        "model.d_model": "is empty; give a number, or leave the field out for its default",
        "training.lr": "is empty; give a number, or leave the field out for its default",
    }
    del data["model"]["d_model"], data["training"]["lr"]
    assert parse_config(data).model.d_model == ModelConfig.model_fields["d_model"].default
