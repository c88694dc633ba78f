"""common/job/params.py: how a variant's parameters become flags and job values, and how variants are found
(in their package, and from installed packages' entry points)."""

from __future__ import annotations

import dataclasses
import types

import pytest

from common.job.params import (
    Component,
    Configurable,
    NoParams,
    ParamClash,
    PluginError,
    defaults_text,
    discover,
    entry_point_group,
    option_specs,
    param,
)
from tests.support.plugins import fake_install


@dataclasses.dataclass(frozen=True)
class RateParams:
    rate: float = param(0.5, "How often.")
    label: str = param("x", "A name.", flag="--the-label")

    def validate(self) -> None:
        if not 0 <= self.rate <= 1:
            raise ValueError("--rate must be in [0, 1]")


class Rated(Configurable):
    name = "rated"
    Params = RateParams


def test_make_params_keeps_defaults_coerces_ints_for_floats_and_validates():
    made = Rated.make_params({"rate": 1})
    assert made == RateParams(rate=1.0) and type(made.rate) is float
    assert Rated.component(made) == Component("rated", {"rate": 1.0, "label": "x"})
    with pytest.raises(ValueError, match=r"--rate must be in \[0, 1\]"):
        Rated.make_params({"rate": 2})


def test_an_unknown_parameter_names_the_flag_and_the_variants_own():
    with pytest.raises(ValueError) as error:
        Rated.make_params({"colour": "red"})
    assert str(error.value) == "--colour does not apply to rated (its options: --the-label, --rate)"


def test_option_specs_merge_fields_declared_shared_and_show_each_default():
    @dataclasses.dataclass(frozen=True)
    class SharingParams:
        rate: float = param(0.5, "How often.", shared=True)
        label: str = param("x", "A name.", flag="--the-label")

    class Sharing(Configurable):
        name = "sharing"
        Params = SharingParams

    @dataclasses.dataclass(frozen=True)
    class OtherParams:
        rate: float = param(0.25, "How often.", shared=True)

    class Other(Configurable):
        name = "other"
        Params = OtherParams

    specs = {spec.flag: spec for spec in option_specs([Sharing, Other])}
    assert specs["--rate"].defaults == {"sharing": 0.5, "other": 0.25}
    assert defaults_text(specs["--rate"]) == "sharing 0.5, other 0.25"
    assert specs["--the-label"].name == "the_label" and specs["--the-label"].field_name == "label"
    assert defaults_text(specs["--the-label"]) == "x"
    assert defaults_text(specs["--the-label"], variants=2) == "x (sharing)", "which variants take it"

    @dataclasses.dataclass(frozen=True)
    class ClashParams:
        rate: int = 1

    class Clash(Configurable):
        name = "clash"
        Params = ClashParams

    with pytest.raises(ParamClash, match="--rate is declared float by 'sharing'.*and int by 'clash'"):
        option_specs([Sharing, Clash])


def test_two_variants_declaring_one_flag_of_one_type_are_refused_unless_both_share_it():
    """Two variants' fields of one name and type were one flag, silently: a plugin's ``--rate`` set the other
    variant's too.  Now both must declare it shared; a flag of its own (``flag=``) keeps them apart."""

    @dataclasses.dataclass(frozen=True)
    class AloneParams:
        rate: float = param(0.25, "How often, its own way.")

    class Alone(Configurable):
        name = "alone"
        Params = AloneParams

    with pytest.raises(ParamClash) as clash:
        option_specs([Rated, Alone])
    assert str(clash.value).startswith("--rate is declared by 'rated' (tests.common.test_params.Rated) and by "
                                       "'alone' (")
    assert "shared=True" in str(clash.value) and "flag=" in str(clash.value)

    @dataclasses.dataclass(frozen=True)
    class ApartParams:
        rate: float = param(0.25, "How often, its own way.", flag="--alone-rate")

    class Apart(Configurable):
        name = "apart"
        Params = ApartParams

    specs = {spec.flag: spec for spec in option_specs([Rated, Apart])}
    assert specs["--rate"].defaults == {"rated": 0.5} and specs["--alone-rate"].defaults == {"apart": 0.25}
    assert Apart.make_params({"rate": 0.75}).rate == 0.75  # the field, set through its own flag


def test_discover_finds_the_package_variants_by_name():
    from common.objectives.base import Objective

    found = discover("common.objectives", Objective)
    assert {"bert", "albert", "electra", "roberta", "tokens"} <= set(found)
    assert all(cls.name == name for name, cls in found.items())
    assert entry_point_group("common.objectives") == "mlm_pipeline.objectives"


class _EntryPoint:
    """What importlib.metadata hands back, for the loading paths alone (the installed case is tests/e2e)."""

    def __init__(self, name, value, loaded):
        self.name, self.value, self.dist, self._loaded = name, value, None, loaded

    def load(self):
        if isinstance(self._loaded, Exception):
            raise self._loaded
        return self._loaded


def test_entry_points_add_classes_and_modules_and_refuse_what_is_not_a_variant(monkeypatch):
    from common.word_segmenters.base import WordSegmenter

    class Chars(WordSegmenter):
        name = "chars-test"
        Params = NoParams

        def word_lengths(self, runs):
            return [[1] * len(run) for run in runs]

    module = types.ModuleType("plugin_module")
    module.Chars = Chars
    points = [_EntryPoint("a", "plugin_module", module)]
    monkeypatch.setattr("common.job.params._entry_points", lambda group: points if group.endswith("segmenters")
                        else [])
    assert discover("common.word_segmenters", WordSegmenter)["chars-test"] is Chars

    points[:] = [_EntryPoint("b", "plugin_module:X", int)]
    with pytest.raises(PluginError, match="entry point b = plugin_module:X .* gives no WordSegmenter"):
        discover("common.word_segmenters", WordSegmenter)
    points[:] = [_EntryPoint("c", "gone:X", ImportError("no module named gone"))]
    with pytest.raises(PluginError, match="cannot be loaded: ImportError: no module named gone"):
        discover("common.word_segmenters", WordSegmenter)


def test_entry_points_are_scanned_once_per_path_and_again_when_it_changes(monkeypatch, tmp_path):
    """Discovery scans the installed distributions once for every axis (common/job/params.py), yet a package that
    appears on a new sys.path entry (an install into a fresh directory) is found."""
    from common.word_segmenters.base import WordSegmenter

    module = tmp_path / "throwaway_words.py"
    module.write_text("from common.job.params import NoParams\nfrom common.word_segmenters.base import WordSegmenter\n\n"
                      "class Whole(WordSegmenter):\n    name = 'whole-test'\n    Params = NoParams\n\n"
                      "    def word_lengths(self, runs):\n        return [[len(run)] for run in runs]\n")
    fake_install(tmp_path, "throwaway-words", "[mlm_pipeline.word_segmenters]\nwhole = throwaway_words\n",
                 version="0.1")

    scans = []
    import importlib.metadata
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda: scans.append(1) or real())
    assert "whole-test" not in discover("common.word_segmenters", WordSegmenter)
    discover("common.word_segmenters", WordSegmenter)
    assert len(scans) <= 1, "the same sys.path was scanned twice"
    monkeypatch.syspath_prepend(str(tmp_path))
    assert discover("common.word_segmenters", WordSegmenter)["whole-test"].__module__ == "throwaway_words"


def test_cache_clear_finds_a_plugin_installed_since_into_the_same_path(monkeypatch, tmp_path):
    """``pip install`` of a plugin into a directory already on sys.path (a site-packages), then the axis's
    ``cache_clear()`` (as common/job/params.py says): the new variant is found, though sys.path did not change."""
    from common import word_segmenters

    monkeypatch.syspath_prepend(str(tmp_path))
    word_segmenters.word_segmenters.cache_clear()
    try:
        assert "late-test" not in word_segmenters.word_segmenters()
        (tmp_path / "late_words.py").write_text(
            "from common.job.params import NoParams\nfrom common.word_segmenters.base import WordSegmenter\n\n"
            "class Late(WordSegmenter):\n    name = 'late-test'\n    Params = NoParams\n\n"
            "    def word_lengths(self, runs):\n        return [[len(run)] for run in runs]\n")
        fake_install(tmp_path, "late-words", "[mlm_pipeline.word_segmenters]\nlate = late_words\n", version="0.1")
        word_segmenters.word_segmenters.cache_clear()
        assert word_segmenters.word_segmenter_named("late-test").__module__ == "late_words"
    finally:
        monkeypatch.undo()
        word_segmenters.word_segmenters.cache_clear()


def test_a_plugin_found_while_its_directory_was_on_sys_path_is_gone_once_it_is_not(monkeypatch, tmp_path):
    """An axis's variants are found again when sys.path changes: a test (or a notebook) that put a plugin's
    directory on the path and took it away again left every axis it had not cleared holding the plugin's
    variants, so --help's defaults in the same process counted a segmenter no longer installed."""
    from common import word_segmenters

    (tmp_path / "gone_words.py").write_text(
        "from common.job.params import NoParams\nfrom common.word_segmenters.base import WordSegmenter\n\n"
        "class Gone(WordSegmenter):\n    name = 'gone-test'\n    Params = NoParams\n\n"
        "    def word_lengths(self, runs):\n        return [[len(run)] for run in runs]\n")
    fake_install(tmp_path, "gone-words", "[mlm_pipeline.word_segmenters]\ngone = gone_words\n", version="0.1")
    before = set(word_segmenters.word_segmenters())
    with monkeypatch.context() as patched:
        patched.syspath_prepend(str(tmp_path))
        assert set(word_segmenters.word_segmenters()) == before | {"gone-test"}
    assert set(word_segmenters.word_segmenters()) == before  # no cache_clear(): the path alone


def test_a_help_among_clicks_settings_is_the_help_and_a_setting_param_makes_is_refused():
    """Click's habit, ``param(cli={"help": ...})``: the help (it was a TypeError when the options were made);
    a setting param makes itself (the default) is a ValueError naming it, which the plugin loader reports in one
    line naming the plugin (tests/test_cli.py)."""
    from common.job.params import option_of, param

    @dataclasses.dataclass(frozen=True)
    class P:
        digits: int = param(3, "", cli={"help": "At most this many.", "metavar": "N"})

    option = option_of(dataclasses.fields(P)[0])
    assert option.help == "At most this many." and option.click == {"metavar": "N"}
    with pytest.raises(ValueError, match="cli={'default': ...} is param's own"):
        param(3, "Digits.", cli={"default": 4})
    with pytest.raises(ValueError, match="two help texts"):
        param(3, "Digits.", cli={"help": "Other."})
