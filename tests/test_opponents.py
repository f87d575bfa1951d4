"""Opponent specs, read in one place: each kind, its name, and the one-line errors."""

import pytest

from maple_async import opponents as O
from maple_async.errors import ConfigError, UserError


def test_each_kind_of_spec_and_its_name(tmp_path):
    ckpt = tmp_path / "latest.pt"
    ckpt.write_bytes(b"")
    assert O.parse("self") == O.Opponent(O.SELF, "self")
    assert O.parse("max_power").is_baseline
    assert (O.parse(str(ckpt)).kind, O.parse(str(ckpt)).name) == (O.CHECKPOINT, "latest.pt")
    assert (O.parse("pkg.mod:policy").kind, O.parse("pkg.mod:policy").name) == (O.POLICY, "pkg.mod:policy")

    def my_policy(obs, masks):
        return masks.argmax(1)
    assert (O.parse(my_policy).kind, O.parse(my_policy).name) == (O.POLICY, "my_policy")
    with pytest.raises(ValueError, match="opponent 'wizard': expected self, random, max_power, heuristics, "
                                         "a checkpoint file, a policy object or module:attr"):
        O.parse("wizard")


def test_lists_of_opponents(tmp_path):
    ckpt = tmp_path / "a.pt"
    ckpt.write_bytes(b"")
    assert [o.kind for o in O.eval_list(f" random,{ckpt} ,")] == [O.BASELINE, O.CHECKPOINT]
    with pytest.raises(UserError, match="--opponents must list random, max_power, heuristics, search or checkpoint "
                                        "files; got 'nope.pt'"):
        O.eval_list("random,nope.pt")
    with pytest.raises(UserError, match="got ''"):
        O.eval_list(",")
    assert O.baseline_list("heuristics,random") == ["heuristics", "random"]
    with pytest.raises(UserError, match="--opponents lists no opponent"):
        O.baseline_list(" , ")
    with pytest.raises(ConfigError, match="unknown opponent 'wizard'"):
        O.parse_opponent_mix("self:1,wizard:2")
    assert O.policy_ref("path/to/file.py:make") == ("path/to/file.py", "make")
    with pytest.raises(UserError, match="expected module:attr"):
        O.policy_ref("module")
