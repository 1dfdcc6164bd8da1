"""The reference plugin code's own contract: name validation, the flag's registration, loader
details, override pinning, inference errors, model resolution and ModelArgs pickling."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from rtp_ref.args import EnvArgumentParser
from rtp_ref.errors import RtpRefError
from rtp_ref.plugins import (
    ExternalPackageImportError,
    ModelArgs,
    ModelRegistrationError,
    ModelRegistry,
    ModelTypeInferenceError,
    UnknownModelTypeError,
    add_external_model_packages_argument,
    derive_propose_args,
    infer_model_type,
    load_external_model_packages,
    parse_external_model_packages,
    resolve_model,
    validate_package_name,
)
from rtp_ref.plugins.model_args import PROPOSE_OWN_FIELDS, PROPOSE_RESET_FIELDS
from rtp_ref.suites.plugins.helpers import PackageDir


class Builtin:
    pass


class Plugin:
    pass


class Other:
    pass


# -- names and the flag -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["atom.plugin.rtpllm.models", "match.case", "type", "_private.x2", "vendör"])
def test_valid_package_names(name: str) -> None:
    assert validate_package_name(name) == name


@pytest.mark.parametrize(
    ("name", "part", "why"),
    [
        ("a..b", "''", "not a Python identifier"),
        ("x.class", "'class'", "keyword"),
        ("a-b", "'a-b'", "identifier"),
    ],
)
def test_invalid_package_name_names_the_part(name: str, part: str, why: str) -> None:
    with pytest.raises(RtpRefError, match=rf"{name!r}: part {part} .*{why}"):
        validate_package_name(name)


def test_empty_package_list_message() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"no package name in ',,'.*leave the flag out"):
        parse_external_model_packages(",,")


@dataclass
class ServerConfig:
    model_args: ModelArgs = field(default_factory=ModelArgs)


def test_flag_is_command_line_only_bound_and_explains_itself(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ServerConfig()
    parser = EnvArgumentParser(prog="server", config_root=config)
    add_external_model_packages_argument(
        parser.add_argument_group("model"), bind_to="model_args.external_model_packages"
    )
    assert parser.get_cli_only_dests() == {"external_model_packages"}
    monkeypatch.setenv("EXTERNAL_MODEL_PACKAGES", "evil.plugin")
    parser.parse_args([])
    assert config.model_args.external_model_packages == []  # None default: the config keeps its own
    parser.parse_args(["--external_model_packages", "atom.plugin,atom.plugin"])
    assert config.model_args.external_model_packages == ["atom.plugin"]
    parser.print_help()
    help_text = " ".join(capsys.readouterr().out.split())
    assert "runs their code" in help_text and "command line only" in help_text


# -- loader -----------------------------------------------------------------------------------------


def test_loader_validates_every_name_before_importing_any() -> None:
    imported: list[str] = []

    def importer(name: str) -> ModuleType:
        imported.append(name)
        return ModuleType(name)

    with pytest.raises(RtpRefError, match=r"'\.\./x'"):
        load_external_model_packages(["good", "../x"], importer=importer)
    assert imported == []


def test_loader_imports_duplicates_once_and_logs_each_package(
    packages: PackageDir, caplog: pytest.LogCaptureFixture
) -> None:
    name = packages.write("VALUE = 1\n")
    with caplog.at_level(logging.INFO, logger="rtp_ref.plugins.loader"):
        modules = load_external_model_packages([name, name])
        load_external_model_packages([name])
    assert [m.__name__ for m in modules] == [name]
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith(f"external model package {name!r} imported (")
    assert messages[1].startswith(f"external model package {name!r} was already imported")


def test_import_error_is_an_import_error_with_the_package_name() -> None:
    def importer(name: str) -> ModuleType:
        raise ModuleNotFoundError(f"No module named {name!r}")

    with pytest.raises(ExternalPackageImportError) as error_info:
        load_external_model_packages(["missing.pkg"], importer=importer)
    assert isinstance(error_info.value, ImportError)
    assert error_info.value.name == "missing.pkg"
    assert "(1 of 1: missing.pkg): ModuleNotFoundError" in str(error_info.value)


# -- registry ---------------------------------------------------------------------------------------


def test_second_override_of_one_name_is_an_error() -> None:
    registry = ModelRegistry()
    registry.register("qwen35_moe", Builtin)
    registry.register("qwen35_moe", Plugin, override=True)
    with pytest.raises(ModelRegistrationError, match=r"already overridden by .*Plugin"):
        registry.register("qwen35_moe", Other, override=True)
    registry.register("qwen35_moe", Plugin, override=True)  # the same plugin again: fine


def test_override_of_an_architecture_for_a_new_name_warns_and_sticks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ATOM's shape: a new model name that takes over a built-in architecture."""
    registry = ModelRegistry()
    arch = "GlmMoeDsaForCausalLM"
    with caplog.at_level(logging.WARNING):
        registry.register("atom_glm5_moe", Plugin, architectures=[arch], override=True)
        registry.register("glm_5", Builtin, architectures=[arch])  # the built-in, imported later
    assert registry.model_type_for_architecture(arch) == "atom_glm5_moe"
    assert registry.model_class("glm_5") is Builtin
    assert f"HF architecture {arch!r}: mapping to 'glm_5' ignored" in caplog.text


def test_registration_input_is_checked() -> None:
    registry = ModelRegistry()
    with pytest.raises(ModelRegistrationError, match="expected a class"):
        registry.register("x", Builtin(), architectures=["A"])
    with pytest.raises(ModelRegistrationError, match="architectures must be non-empty strings"):
        registry.register("x", Builtin, architectures=[""])


def test_unknown_model_type_lists_the_registered_ones() -> None:
    registry = ModelRegistry()
    registry.register("b_model", Builtin)
    registry.register("a_model", Plugin)
    with pytest.raises(
        UnknownModelTypeError, match=r"'c_model' is not registered \(registered: a_model, b_model\)"
    ):
        registry.model_class("c_model")
    assert registry.model_types() == ("b_model", "a_model")


def test_snapshot_and_restore() -> None:
    registry = ModelRegistry()
    registry.register("a_model", Builtin, architectures=["A"], repos=["org/a"])
    saved = registry.snapshot()
    registry.register("b_model", Plugin, architectures=["B"])
    registry.restore(saved)
    assert registry.model_types() == ("a_model",)
    assert registry.architectures() == {"A": "a_model"}
    assert registry.model_type_for_repo("org/a") == "a_model"


# -- inference and resolution ----------------------------------------------------------------------


@pytest.fixture
def registry() -> ModelRegistry:
    registry = ModelRegistry()
    registry.register("fake_model", Builtin, architectures=["FakeArch"])
    registry.register("other_model", Other, architectures=["OtherArch"])
    return registry


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no config.json in checkpoint"),
        ("{not json", "cannot read"),
        ("[1, 2]", "holds list, expected a JSON object"),
        ('{"architectures": "FakeArch"}', "expected a list of strings"),
        ('{"architectures": ["FakeArch", "OtherArch"]}', "FakeArch -> fake_model, OtherArch -> other_model"),
        ("{}", r"its architectures \[\] match no registered architecture"),
    ],
)
def test_inference_errors(
    registry: ModelRegistry, checkpoint: Path, content: str | None, message: str
) -> None:
    if content is not None:
        (checkpoint / "config.json").write_text(content, encoding="utf-8")
    with pytest.raises(ModelTypeInferenceError, match=message):
        infer_model_type(checkpoint, registry)


def test_inference_needs_a_local_directory(registry: ModelRegistry, tmp_path: Path) -> None:
    with pytest.raises(ModelTypeInferenceError, match=r"not a local directory.*--model_type"):
        infer_model_type(tmp_path / "org/remote-model", registry)


def test_resolve_model_with_a_given_type_checks_it_is_registered(registry: ModelRegistry) -> None:
    resolved = resolve_model(ModelArgs(model_type="fake_model"), registry=registry)
    assert (resolved.model_type, resolved.model_cls) == ("fake_model", Builtin)
    with pytest.raises(UnknownModelTypeError, match="--external_model_packages"):
        resolve_model(ModelArgs(model_type="atom_model"), registry=registry)


def test_resolve_model_without_type_or_checkpoint_says_so(registry: ModelRegistry) -> None:
    with pytest.raises(ModelTypeInferenceError, match="no ckpt_path"):
        resolve_model(ModelArgs(), registry=registry)


def test_resolve_model_loads_with_the_given_importer(registry: ModelRegistry, checkpoint: Path) -> None:
    def importer(name: str) -> ModuleType:
        registry.register("vendor_model", Plugin, architectures=["VendorArch"])
        return ModuleType(name)

    (checkpoint / "config.json").write_text(json.dumps({"architectures": ["VendorArch"]}), encoding="utf-8")
    args = ModelArgs(ckpt_path=str(checkpoint), external_model_packages=["vendor.models"])
    assert resolve_model(args, registry=registry, importer=importer).model_cls is Plugin


# -- ModelArgs ------------------------------------------------------------------------------------


class _OldPickle:
    """Pickles as a ModelArgs written before ``external_model_packages`` existed."""

    def __init__(self, state: dict[str, object]) -> None:
        self.state = state

    def __reduce__(self) -> tuple[object, ...]:
        return (object.__new__, (ModelArgs,), self.state)


def test_old_pickle_without_a_new_field_gets_its_default() -> None:
    state = ModelArgs(model_type="qwen").__getstate__()
    del state["external_model_packages"]
    restored = pickle.loads(pickle.dumps(_OldPickle(state)))
    assert isinstance(restored, ModelArgs)
    assert (restored.model_type, restored.external_model_packages) == ("qwen", [])


def test_pickle_with_unknown_fields_is_an_error() -> None:
    state = {**ModelArgs().__getstate__(), "future_field": 1}
    with pytest.raises(RtpRefError, match="future_field"):
        pickle.loads(pickle.dumps(_OldPickle(state)))


def test_every_model_args_field_has_a_decided_propose_behaviour() -> None:
    """A new field must be classified: the draft's own, reset, or (by default) inherited."""
    inherited = {
        "tokenizer_path",
        "task_type",
        "act_type",
        "mla_ops_type",
        "enable_fp32_lm_head",
        "external_model_packages",
    }
    all_fields = {f.name for f in dataclasses.fields(ModelArgs)}
    assert all_fields - PROPOSE_OWN_FIELDS - PROPOSE_RESET_FIELDS == inherited


def test_propose_args_own_fields_resets_and_no_shared_list() -> None:
    main = ModelArgs(
        ckpt_path="/main",
        extra_data_path="/main/extra",
        max_seq_len=8192,
        quantization="fp8",
        act_type="bf16",
        external_model_packages=["atom.plugin"],
    )
    draft = derive_propose_args(main, ckpt_path="/draft", model_type="mtp", max_seq_len=4096)
    assert (draft.ckpt_path, draft.model_type, draft.max_seq_len, draft.quantization) == (
        "/draft",
        "mtp",
        4096,
        None,
    )
    assert (draft.extra_data_path, draft.act_type) == ("", "bf16")
    draft.external_model_packages.append("draft.only")
    assert main.external_model_packages == ["atom.plugin"]
