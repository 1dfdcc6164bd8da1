"""Behaviour of external model package loading, through the kit (``plugins_kit``, rtp_ref/suites/plugins/kit.py).

Real boundaries only: packages are written to a temporary directory and imported by the import
system; the worker tests spawn a real ``multiprocessing`` 'spawn' child. Tests named after a bug
of docs/sources.md#rtp-llm-model-registry-and-plugins or a review finding fail on the emulations of rtp-llm
(rtp_ref/suites/plugins/rtp_llm_main_plugins.py and, with PR #1266, legacy_rtp_llm_plugins.py, through their
adapters); tests/args/test_legacy_emulation.py checks that. A test that needs a feature the implementation lacks
(the flag, package loading, an injected importer, override registration: rtp_ref/suites/features.py) ends
absent.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest

from rtp_ref.suites.absence import absent, refused_keyword, require
from rtp_ref.suites.plugins.helpers import PackageDir
from rtp_ref.suites.plugins.kit import PluginsKit
from rtp_ref.suites.plugins.spawn_child import model_config_class_in_worker, resolve_in_worker

T = TypeVar("T")
SPAWN_TIMEOUT_S = 120


def _error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    return lines[-1] if lines else ""


def _no_exception(call: Callable[[], T]) -> T:
    """``call()``; an exception fails the test (the behaviour under test is "this works")."""
    try:
        return call()
    except Exception as exc:
        pytest.fail(f"{type(exc).__name__}: {exc}")


def _write_config(checkpoint: Path, **config: Any) -> Path:
    (checkpoint / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return checkpoint


# -- the --external_model_packages flag -----------------------------------------------------------

FLAG = "--external_model_packages"


def _flag_parser(plugins_kit: PluginsKit) -> Any:
    """The kit's parser with the flag: absent when the kit lacks the feature, or when the parser it gives has no
    such flag (argparse would then reject the flag itself, and a test of the flag's rejections would pass for
    that reason)."""
    require(plugins_kit, "package_list")
    parser = plugins_kit.package_list_parser()
    if not any(FLAG in action.option_strings for action in parser._actions):
        absent("package_list", f"the kit's package_list_parser() has no {FLAG}")
    return parser


def test_package_list_separate_token_form(plugins_kit: PluginsKit) -> None:
    args = ["--external_model_packages", "atom.plugin.rtpllm.models,plugin.extra"]
    parsed = _flag_parser(plugins_kit).parse_args(args)
    assert list(parsed.external_model_packages) == ["atom.plugin.rtpllm.models", "plugin.extra"]


def test_package_list_equals_form(plugins_kit: PluginsKit) -> None:
    parsed = _flag_parser(plugins_kit).parse_args(["--external_model_packages=atom.plugin"])
    assert list(parsed.external_model_packages) == ["atom.plugin"]


def test_package_list_strips_blanks_and_drops_duplicates_in_order(plugins_kit: PluginsKit) -> None:
    require(plugins_kit, "package_list")
    assert list(plugins_kit.parse_package_list(" b.c , a ,b.c,a ")) == ["b.c", "a"]


def test_package_list_last_flag_wins(plugins_kit: PluginsKit) -> None:
    args = ["--external_model_packages", "a", "--external_model_packages", "b"]
    assert list(_flag_parser(plugins_kit).parse_args(args).external_model_packages) == ["b"]


@pytest.mark.parametrize("via", ["argv", "list"])
def test_package_list_is_never_read_from_the_environment(
    plugins_kit: PluginsKit, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    monkeypatch.setenv("EXTERNAL_MODEL_PACKAGES", "evil.plugin")
    monkeypatch.setenv("RTP_LLM_EXTERNAL_MODEL_PACKAGES", "evil.plugin")
    parser = _flag_parser(plugins_kit)
    if via == "argv":
        monkeypatch.setattr(sys, "argv", ["prog"])
        parsed = parser.parse_args()
    else:
        parsed = parser.parse_args([])
    assert parsed.external_model_packages is None


BAD_ITEMS = [
    ("../x", "../x"),
    ("a/b.py", "a/b.py"),
    ("a-b", "a-b"),
    (".a", ".a"),
    ("a..b", "a..b"),
    ("import.x", "import.x"),
    ("good.pkg, bad-pkg", "bad-pkg"),
]


@pytest.mark.parametrize(("text", "bad"), BAD_ITEMS, ids=[text for text, _ in BAD_ITEMS])
def test_package_list_rejects_a_bad_item_by_name(
    plugins_kit: PluginsKit, capsys: pytest.CaptureFixture[str], text: str, bad: str
) -> None:
    """Review P2 (assert the message, not just SystemExit); ``import.x``: keywords passed isidentifier."""
    parser = _flag_parser(plugins_kit)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--external_model_packages", text])
    assert exit_info.value.code == 2
    error = _error_line(capsys.readouterr().err)
    assert repr(bad) in error and "--external_model_packages" in error, error


@pytest.mark.parametrize("text", [",,", "", " , "])
def test_package_list_with_no_name_is_rejected(
    plugins_kit: PluginsKit, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """Review P3: ``,,`` gave [], indistinguishable from "no plugins" downstream. The rejection must be the
    value's (argparse's ``argument --external_model_packages: ...``), not one of the flag itself."""
    parser = _flag_parser(plugins_kit)
    try:
        parsed = parser.parse_args(["--external_model_packages", text])
    except SystemExit as exc:
        assert exc.code == 2
        error = _error_line(capsys.readouterr().err)
        assert f"argument {FLAG}: " in error and "expected one argument" not in error, error
    else:
        pytest.fail(f"accepted as {parsed.external_model_packages!r}")


def test_package_flag_help_says_importing_runs_the_packages_code(plugins_kit: PluginsKit) -> None:
    """Review P2 (invisible): the help said only "command line only", not that the packages are imported at
    start-up, which runs their code (the reason the flag is command line only)."""
    parser = _flag_parser(plugins_kit)
    (action,) = [action for action in parser._actions if FLAG in action.option_strings]
    text = " ".join(str(action.help or "").split())
    assert "import" in text and ("code" in text or "代码" in text), f"{FLAG} help: {text!r}"


# -- loading real packages ------------------------------------------------------------------------


def test_real_package_registers_its_architecture(plugins_kit: PluginsKit, packages: PackageDir) -> None:
    """Review P2: the import boundary was only ever mocked; this imports a real package."""
    require(plugins_kit, "package_loading")
    name = packages.write(plugins_kit.plugin_source("fake_arch_model", "FakeModel", ["FakeArch"]))
    plugins_kit.load_packages([name])
    assert plugins_kit.model_type_for_architecture(packages.registry, "FakeArch") == "fake_arch_model"
    assert plugins_kit.model_class(packages.registry, "fake_arch_model").__module__ == name


def _recording_source(log: Path, tag: str, extra: str = "") -> str:
    """Source of a package that appends ``tag`` to ``log`` when imported, then runs ``extra``."""
    return (
        "from pathlib import Path\n"
        f"with Path({str(log)!r}).open('a') as f:\n"
        f"    f.write({tag!r} + '\\n')\n"
        f"{extra}"
    )


def test_packages_load_in_order_and_stop_at_the_first_failure(
    plugins_kit: PluginsKit, packages: PackageDir, tmp_path: Path
) -> None:
    require(plugins_kit, "package_loading")
    log = tmp_path / "imports.log"
    first = packages.write(_recording_source(log, "first"))
    broken = packages.write(_recording_source(log, "broken", "raise RuntimeError('plugin is broken')\n"))
    never = packages.write(_recording_source(log, "never"))
    with pytest.raises(Exception) as error_info:
        plugins_kit.load_packages([first, broken, never])
    message = str(error_info.value)
    assert broken in message and str(packages.root) in message  # the package and the search path
    assert isinstance(error_info.value.__cause__, RuntimeError)
    assert str(error_info.value.__cause__) == "plugin is broken"
    assert log.read_text().split() == ["first", "broken"]
    assert never not in sys.modules


def test_conflicting_plugin_registration_fails_naming_the_package(
    plugins_kit: PluginsKit, packages: PackageDir
) -> None:
    require(plugins_kit, "package_loading")
    original = packages.write(plugins_kit.plugin_source("fake_model", "FakeModel", ["FakeArch"]))
    rival = packages.write(plugins_kit.plugin_source("fake_model", "RivalModel", []))
    with pytest.raises(Exception) as error_info:
        plugins_kit.load_packages([original, rival])
    assert rival in str(error_info.value)
    assert "fake_model" in str(error_info.value.__cause__)


def test_loading_again_does_not_run_plugin_code_again(
    plugins_kit: PluginsKit, packages: PackageDir, tmp_path: Path
) -> None:
    require(plugins_kit, "package_loading")
    log = tmp_path / "imports.log"
    name = packages.write(_recording_source(log, "ran"))
    plugins_kit.load_packages([name])
    plugins_kit.load_packages([name])
    assert log.read_text().split() == ["ran"]


def test_loading_logs_each_package_at_info(
    plugins_kit: PluginsKit, packages: PackageDir, caplog: pytest.LogCaptureFixture
) -> None:
    """Review P2 (invisible): operators see which packages each process loaded, one INFO record per package."""
    require(plugins_kit, "package_loading")
    first, second = packages.write("VALUE = 1\n"), packages.write("VALUE = 2\n")
    with caplog.at_level(logging.INFO):
        plugins_kit.load_packages([first, second])
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert [name for name in (first, second) if not any(name in m for m in infos)] == [], infos


def test_loader_takes_an_injected_importer(plugins_kit: PluginsKit) -> None:
    """Review P3: tests patched importlib globally (and could poison lru_caches); inject instead."""
    imported: list[str] = []

    def importer(name: str) -> ModuleType:
        imported.append(name)
        return ModuleType(name)

    require(plugins_kit, "package_loading")
    with refused_keyword(plugins_kit, "loader_importer", "importer"):
        plugins_kit.load_packages(["vendor.models", "vendor.extra"], importer=importer)
    assert imported == ["vendor.models", "vendor.extra"]


def _fake_arch_plugin_args(plugins_kit: PluginsKit, packages: PackageDir, checkpoint: Path) -> tuple[str, Any]:
    """A plugin package registering model type fake_arch_model for architecture FakeArch, and model args
    that name the package and a checkpoint of that architecture but no model type."""
    require(plugins_kit, "package_loading")
    name = packages.write(plugins_kit.plugin_source("fake_arch_model", "FakeModel", ["FakeArch"]))
    args = plugins_kit.new_model_args(
        ckpt_path=str(_write_config(checkpoint, architectures=["FakeArch"])),
        model_type="",
        external_model_packages=[name],
    )
    return name, args


def test_plugin_architecture_is_inferred_without_a_model_type(
    plugins_kit: PluginsKit, packages: PackageDir, checkpoint: Path
) -> None:
    """Review P2: loading must come before model-type inference, so a plugin's architecture is known."""
    name, args = _fake_arch_plugin_args(plugins_kit, packages, checkpoint)
    model_type, model_cls = _no_exception(lambda: plugins_kit.resolve_model(args))
    assert (model_type, model_cls.__module__, model_cls.__name__) == ("fake_arch_model", name, "FakeModel")


def _in_spawned_worker(args: Any, package: str, work: Callable[[Any, str], dict[str, Any]] = resolve_in_worker
                       ) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        result: dict[str, Any] = pool.apply_async(work, (args, package)).get(SPAWN_TIMEOUT_S)
    return result


def test_spawned_worker_loads_the_plugin_and_resolves_the_model(
    plugins_kit: PluginsKit, packages: PackageDir, checkpoint: Path
) -> None:
    name, args = _fake_arch_plugin_args(plugins_kit, packages, checkpoint)
    result = _in_spawned_worker(args, name)
    assert result == {
        "model_type": "fake_arch_model",
        "model_cls": f"{name}.FakeModel",
        "imported_before": False,
    }
    assert name not in sys.modules  # the worker imported it, this process never did


def test_model_config_entry_point_loads_the_packages_itself(
    plugins_kit: PluginsKit, packages: PackageDir, checkpoint: Path
) -> None:
    """Review P2 (mocked import): the second call site (rtp-llm: ``create_model_config``), called on its own in a
    fresh process that ran no start-up step before it, loads the packages and finds the plugin's model type."""
    name, args = _fake_arch_plugin_args(plugins_kit, packages, checkpoint)
    args.model_type = "fake_arch_model"
    result = _in_spawned_worker(args, name, model_config_class_in_worker)
    assert result == {"model_cls": f"{name}.FakeModel", "imported_before": False}, result


def test_spawned_worker_resolves_the_draft_model_from_the_plugin(
    plugins_kit: PluginsKit, packages: PackageDir, checkpoint: Path, tmp_path: Path
) -> None:
    """Review P3 / #1330: the draft config dropped external_model_packages and relied on call order."""
    require(plugins_kit, "package_loading")
    name = packages.write(plugins_kit.plugin_source("fake_draft_model", "FakeDraft", ["FakeDraftArch"]))
    main = plugins_kit.new_model_args(
        ckpt_path=str(_write_config(checkpoint, architectures=["FakeArch"])),
        model_type="fake_main_model",
        external_model_packages=[name],
    )
    draft = plugins_kit.derive_propose_args(main, ckpt_path=str(tmp_path), model_type="fake_draft_model")
    result = _in_spawned_worker(draft, name)
    assert result.get("model_cls") == f"{name}.FakeDraft", result


def test_model_args_pickle_round_trip_keeps_the_packages(plugins_kit: PluginsKit) -> None:
    require(plugins_kit, "package_loading")
    args = plugins_kit.new_model_args(
        model_type="qwen", external_model_packages=["atom.plugin.rtpllm.models"]
    )
    restored = pickle.loads(pickle.dumps(args))
    assert (restored.model_type, list(restored.external_model_packages)) == (
        "qwen",
        ["atom.plugin.rtpllm.models"],
    )


def test_draft_args_inherit_external_model_packages(plugins_kit: PluginsKit) -> None:
    """Review P3: create_propose_model_config rebuilt ModelArgs without external_model_packages."""
    require(plugins_kit, "package_loading")
    main = plugins_kit.new_model_args(
        model_type="qwen35_moe", tokenizer_path="/tok", external_model_packages=["atom.plugin.rtpllm.models"]
    )
    draft = plugins_kit.derive_propose_args(main, ckpt_path="/draft", model_type="qwen35_moe_mtp")
    assert (draft.ckpt_path, draft.model_type, draft.tokenizer_path) == ("/draft", "qwen35_moe_mtp", "/tok")
    assert list(draft.external_model_packages or []) == ["atom.plugin.rtpllm.models"]


def _declared_fields(args: Any) -> set[str]:
    """The fields ``args``'s class declares: its slots (over the class hierarchy) and dataclass fields."""
    declared = {f.name for f in dataclasses.fields(args)} if dataclasses.is_dataclass(args) else set()
    for cls in type(args).__mro__:
        slots = getattr(cls, "__slots__", ())
        declared |= {slots} if isinstance(slots, str) else set(slots)
    return declared - {"__dict__", "__weakref__"}


def test_model_args_fields_all_have_values(plugins_kit: PluginsKit) -> None:
    """Section 4: extra_data_path and local_extra_data_path were never set (AttributeError on read); no field
    the class declares may be left unset."""
    args = plugins_kit.new_model_args()
    fields = _declared_fields(args) | {"extra_data_path", "local_extra_data_path"}
    assert sorted(f for f in fields if not hasattr(args, f)) == []


def _pickle_without(args: Any, field: str) -> bytes:
    """A pickle of ``args`` as a version of its class without ``field`` wrote it: its own reduction, with the
    field taken out of the state (a dict, or ``(dict, slots dict)`` for slotted classes)."""
    reduced = args.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    assert isinstance(reduced, tuple) and len(reduced) >= 3, f"cannot take a field out of {reduced!r}"
    state = reduced[2]
    parts = state if isinstance(state, tuple) else (state,)
    trimmed = tuple({k: v for k, v in part.items() if k != field} if isinstance(part, dict) else part
                    for part in parts)
    make, make_args = reduced[0], reduced[1]
    if getattr(make, "__name__", "") == "__newobj__":  # pickle takes copyreg's for an object of that class only
        make = make_args[0].__new__
    old = (make, make_args, trimmed if isinstance(state, tuple) else trimmed[0], *reduced[3:])

    class _OldVersion:
        def __reduce__(self) -> tuple[Any, ...]:
            return old

    return pickle.dumps(_OldVersion())


def _state_fields(args: Any) -> list[str]:
    state = args.__reduce_ex__(pickle.HIGHEST_PROTOCOL)[2]
    return sorted(k for part in (state if isinstance(state, tuple) else (state,)) if isinstance(part, dict)
                  for k in part)


def test_model_args_pickled_without_a_field_reads_its_default(plugins_kit: PluginsKit) -> None:
    """Section 4: ModelArgs is pickled to spawned workers; one pickled by a version that did not have a field yet
    (slot pickling) raised AttributeError on that field. Whichever field is the new one, it reads as a fresh
    object's."""
    fresh = plugins_kit.new_model_args()
    fields = _state_fields(fresh)
    assert fields, "ModelArgs pickles no field"
    broken = {}
    for field in fields:
        restored = pickle.loads(_pickle_without(fresh, field))
        try:
            if getattr(restored, field) != getattr(fresh, field):
                broken[field] = f"{getattr(restored, field)!r}, a fresh object has {getattr(fresh, field)!r}"
        except AttributeError as exc:
            broken[field] = f"AttributeError: {exc}"
    assert broken == {}, broken


# -- the model registry and inference -------------------------------------------------------------


class Builtin:
    pass


class Plugin:
    pass


def test_conflicting_name_is_rejected(plugins_kit: PluginsKit, registry: Any) -> None:
    plugins_kit.register(
        registry, "qwen35_moe", Builtin, architectures=["Qwen3_5MoeForConditionalGeneration"]
    )
    with pytest.raises(Exception, match="qwen35_moe"):
        plugins_kit.register(registry, "qwen35_moe", Plugin)
    plugins_kit.register(registry, "qwen35_moe", Builtin)  # the same class again is fine
    assert plugins_kit.model_class(registry, "qwen35_moe") is Builtin


def test_conflicting_architecture_is_rejected(plugins_kit: PluginsKit, registry: Any) -> None:
    plugins_kit.register(registry, "glm_5", Builtin, architectures=["GlmMoeDsaForCausalLM"])
    with pytest.raises(Exception, match="GlmMoeDsaForCausalLM"):
        plugins_kit.register(registry, "atom_glm5_moe", Plugin, architectures=["GlmMoeDsaForCausalLM"])


def test_failed_registration_changes_nothing(plugins_kit: PluginsKit, registry: Any) -> None:
    """Section 3: architectures and repos were registered after the name, outside the lock."""
    plugins_kit.register(registry, "glm_5", Builtin, architectures=["GlmMoeDsaForCausalLM"])
    with pytest.raises(Exception, match="GlmMoeDsaForCausalLM"):
        plugins_kit.register(
            registry, "atom_glm5", Plugin, architectures=["AtomGlmArch", "GlmMoeDsaForCausalLM"]
        )
    assert plugins_kit.model_type_for_architecture(registry, "AtomGlmArch") is None
    with pytest.raises(Exception, match="atom_glm5"):
        plugins_kit.model_class(registry, "atom_glm5")


def test_plugin_override_replaces_a_model_type_with_a_warning(
    plugins_kit: PluginsKit, registry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Section 5: ATOM overwrote the registry dicts directly, silently, for want of a way to replace a type."""
    require(plugins_kit, "override_registration")
    plugins_kit.register(
        registry, "qwen35_moe", Builtin, architectures=["Qwen3_5MoeForConditionalGeneration"]
    )
    with caplog.at_level(logging.WARNING):
        plugins_kit.register(
            registry,
            "qwen35_moe",
            Plugin,
            architectures=["Qwen3_5MoeForConditionalGeneration"],
            override=True,
        )
    assert plugins_kit.model_class(registry, "qwen35_moe") is Plugin
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("qwen35_moe" in m and "Plugin" in m and "Builtin" in m for m in warnings), warnings


def test_builtin_registered_after_an_override_keeps_the_plugin(plugins_kit: PluginsKit, registry: Any) -> None:
    """Section 5: a later lazy import of the built-in (e.g. by the MTP draft) raised the conflict."""
    require(plugins_kit, "override_registration")
    arch = "Qwen3_5MoeForConditionalGeneration"
    plugins_kit.register(registry, "qwen35_moe", Plugin, architectures=[arch], override=True)
    _no_exception(lambda: plugins_kit.register(registry, "qwen35_moe", Builtin, architectures=[arch]))
    assert plugins_kit.model_class(registry, "qwen35_moe") is Plugin


def test_inference_tries_every_listed_architecture(plugins_kit: PluginsKit, registry: Any, checkpoint: Path) -> None:
    """Section 3: only architectures[0] was looked up."""
    plugins_kit.register(registry, "fake_arch_model", Builtin, architectures=["FakeArch"])
    _write_config(checkpoint, architectures=["UnregisteredHead", "FakeArch"])
    assert _no_exception(lambda: plugins_kit.infer_model_type(checkpoint, registry)) == "fake_arch_model"


def test_inference_falls_back_to_the_registered_repo(
    plugins_kit: PluginsKit, registry: Any, checkpoint: Path
) -> None:
    """Section 3: the HF-repo mapping was registered but never used."""
    plugins_kit.register(registry, "fake_arch_model", Builtin, repos=["vendor/fake-7b"])
    _write_config(checkpoint, architectures=["UnregisteredHead"], _name_or_path="vendor/fake-7b")
    assert _no_exception(lambda: plugins_kit.infer_model_type(checkpoint, registry)) == "fake_arch_model"


def test_inference_failure_says_what_was_found_and_what_to_do(
    plugins_kit: PluginsKit, registry: Any, checkpoint: Path
) -> None:
    """Section 3: errors became None, then a ValueError that named nothing."""
    plugins_kit.register(registry, "fake_arch_model", Builtin, architectures=["FakeArch"])
    _write_config(checkpoint, architectures=["NoSuchArch"])
    with pytest.raises(Exception) as error_info:
        plugins_kit.infer_model_type(checkpoint, registry)
    message = str(error_info.value)
    assert all(
        s in message for s in ("NoSuchArch", "FakeArch", "--model_type", "--external_model_packages")
    ), message
