"""What crossspec writes for its users is readable as the umask says (crossspec_ros/files.py)."""

import os
import stat

import torch
from safetensors.torch import save_file

from crossspec_ros.files import current_umask, follow_umask


def test_the_umask_is_read_without_changing_it():
    before = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        assert current_umask() == 0o027
    finally:
        os.umask(before)


def test_a_safetensors_result_gets_the_modes_the_umask_gives(tmp_path):
    before = os.umask(0o022)
    try:
        out = tmp_path / "drafter"
        out.mkdir(mode=0o700)
        save_file({"w": torch.zeros(2)}, str(out / "model.safetensors"))
        assert stat.S_IMODE((out / "model.safetensors").stat().st_mode) == 0o600  # why
        follow_umask(out)
        assert stat.S_IMODE(out.stat().st_mode) == 0o755
        assert stat.S_IMODE((out / "model.safetensors").stat().st_mode) == 0o644
    finally:
        os.umask(before)


def test_distilled_results_and_label_caches_are_readable_by_others(tmp_path):
    from crossspec_ros.train.distill import _atomic, publish_directory

    before = os.umask(0o022)
    try:
        cache = tmp_path / "labels.safetensors"
        _atomic(cache, lambda tmp: save_file({"x": torch.ones(1)}, tmp))
        publish_directory(lambda d: (d.mkdir(mode=0o700), save_file(
            {"w": torch.zeros(1)}, str(d / "head.safetensors"))), tmp_path / "out")
        for path in (cache, tmp_path / "out" / "head.safetensors"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
        assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o755
    finally:
        os.umask(before)
