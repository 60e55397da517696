"""A dvc.lock cut by a kill while DVC wrote it: each stage keeps a copy of the file as DVC started it, and
tools.heal_lock (make repro's first step) puts that copy back. The whole DVC round trip is in test_dvc_pipeline."""

import shutil

import pytest

from tests.helpers import ROOT, TINY, run_stage_process
from toksel.runtime.workspace import LOCK, LOCK_COPY
from tools import heal_lock
from tools.profile import SET_ASIDE, starting_from


@pytest.fixture
def locked(project):
    """The project with the repository's own dvc.lock, a whole one."""
    shutil.copy(ROOT / "dvc.lock", project / LOCK)
    return project


def test_a_stage_started_by_dvc_keeps_a_copy_of_the_lock_as_it_was(locked):
    assert run_stage_process("prepare", TINY, locked).returncode == 0  # by hand: no copy
    assert not (locked / LOCK_COPY).exists()
    assert run_stage_process("prepare", TINY, locked, DVC_STAGE="prepare@synthetic").returncode == 0
    assert (locked / LOCK_COPY).read_bytes() == (locked / LOCK).read_bytes()


def test_a_cut_lock_is_replaced_by_the_copy_and_kept_aside(locked, capsys):
    whole = (locked / LOCK).read_bytes()
    (locked / LOCK_COPY).parent.mkdir(parents=True)
    (locked / LOCK_COPY).write_bytes(whole)
    # Cut after a key whose value was not written yet, as DVC's error after a kill had it ("expected str, in
    # stages -> phase_diagram -> deps -> 18 -> hash"). A cut inside a value leaves a file DVC reads: the stage's
    # record then differs from its files and DVC runs it again, so heal_lock leaves such a file alone.
    cut = whole[: whole.index(b"hash:", len(whole) * 2 // 3) + len(b"hash:")]
    (locked / LOCK).write_bytes(cut)
    assert not heal_lock.whole(locked / LOCK)  # DVC would refuse it
    assert heal_lock.main([]) == 0
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "dvc.lock was cut" in said[0] and "replaced by its copy" in said[0]
    assert (locked / LOCK).read_bytes() == whole and (locked / "dvc.lock.damaged").read_bytes() == cut


def test_without_a_copy_the_cut_lock_is_set_aside_and_a_whole_one_is_left_alone(locked, capsys):
    whole = (locked / LOCK).read_bytes()
    assert heal_lock.main([]) == 0 and capsys.readouterr().err == ""
    assert (locked / LOCK).read_bytes() == whole
    cut = whole[: whole.index(b"hash:", 1000) + len(b"hash:")]  # after a key whose value was not written yet
    (locked / LOCK).write_bytes(cut)
    assert heal_lock.main([]) == 0
    assert "no whole copy was kept" in capsys.readouterr().err
    assert not (locked / LOCK).exists() and (locked / "dvc.lock.damaged").read_bytes() == cut


def test_the_workspace_lock_a_stopped_profile_run_set_aside_is_put_back(locked, capsys):
    """tools.profile puts another experiment's dvc.lock in the workspace's place while DVC copies the workspace; a
    run killed before it put the workspace's back leaves it in .dvc/tmp, and heal_lock (make's first step) restores
    it: the workspace's own, or none where there was none."""
    own = (locked / LOCK).read_bytes()
    with starting_from("stages: {}\n"):
        # as a kill of the run would leave it: the stand-in in place, the workspace's own set aside
        assert (locked / LOCK).read_text() == "stages: {}\n" and (locked / SET_ASIDE).read_bytes() == own
        assert heal_lock.main([]) == 0
        assert (locked / LOCK).read_bytes() == own and not (locked / SET_ASIDE).exists()
        assert "the workspace's is back" in capsys.readouterr().err
    assert (locked / LOCK).read_bytes() == own  # put back already: nothing more to do
    (locked / LOCK).unlink()
    with starting_from("stages: {}\n"):
        assert (locked / LOCK).is_file()
    assert not (locked / LOCK).exists() and not (locked / SET_ASIDE).exists()
    assert heal_lock.main([]) == 0 and capsys.readouterr().err == ""
