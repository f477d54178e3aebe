"""hvd.elastic.State subclasses of the user's own (no MPI needed: the checks come before any
collective).  Horovod's contract: save/restore/sync; a chained wml job also needs
persisted/load_persisted, and says so at the first commit or resume, not at the walltime."""
import pytest

from ddl_runtime.checkpoint.protocol import CHECKPOINT_DIR_ENV
from ddl_runtime.errors import DDLInputError
from ddl_runtime.horovod.common.elastic import State


class Mine(State):  # what a Horovod user writes: the three methods Horovod asks for
    def __init__(self):
        super().__init__(bcast_object=lambda obj: obj, get_rank=lambda: 0)
        self.value, self.saved = 0, 0

    def save(self):
        self.saved = self.value

    def restore(self):
        self.value = self.saved

    def sync(self):
        pass


def test_a_state_without_horovods_methods_cannot_be_made():
    class Partial(State):
        def save(self):
            pass

    with pytest.raises(TypeError, match="restore"):
        Partial(bcast_object=lambda obj: obj, get_rank=lambda: 0)


def test_outside_a_chain_a_custom_state_commits_and_restores(monkeypatch):
    monkeypatch.delenv(CHECKPOINT_DIR_ENV, raising=False)
    s = Mine()
    s.value = 3
    s.commit()
    s.value = 9
    s.restore()
    assert s.value == 3 and s.resume_from_checkpoint() is False


def test_in_a_chain_a_custom_state_without_persistence_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv(CHECKPOINT_DIR_ENV, str(tmp_path))
    s = Mine()
    for call in (s.resume_from_checkpoint, s.commit):
        with pytest.raises(DDLInputError) as err:
            call()
        text = str(err.value)
        assert "Mine defines no persisted()/load_persisted()" in text and "--chain" in text and "\n" not in text
    assert list(tmp_path.iterdir()) == []  # nothing written
