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
    stages = O.parse_opponent_schedule("max_power:3,self:1 ; @5e5 self:0.8,league:0.2;@1000000 self")
    assert stages == [(0, {"max_power": 0.75, "self": 0.25}), (500_000, {"self": 0.8, "league": 0.2}),
                      (1_000_000, {"self": 1.0})]
    assert O.mix_at(stages, 499_999) == {"max_power": 0.75, "self": 0.25} and O.mix_at(stages, 500_000)["league"] == 0.2
    assert O.mix_names("random:1; @10 self:1") == {"random", "self"}
    assert O.parse_opponent_schedule("self:1") == [(0, {"self": 1.0})]
    for spec, why in [("random:1; self:1", "starts with @ and the decisions it begins at"),
                      ("random:1; @0 self:1", "starts with @"),
                      ("random:1; @nan self:1", "starts with @"),
                      ("random:1; 5e5 self:1", "starts with @"),
                      ("random:1; @10 self:1; @10 random:1", "starts must grow; 10 comes after 10"),
                      ("random:1; @10 wizard:1", "unknown opponent 'wizard'")]:
        with pytest.raises(ConfigError, match=why):
            O.parse_opponent_schedule(spec)
    assert O.policy_ref("path/to/file.py:make") == ("path/to/file.py", "make")
    with pytest.raises(UserError, match="expected module:attr"):
        O.policy_ref("module")
